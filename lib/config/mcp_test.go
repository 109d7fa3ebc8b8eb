package config

import (
	"strings"
	"testing"
	"time"
)

func TestMCP(t *testing.T) {
	o, err := ParseOrg("org.toml", []byte(`
[mcp.gh]
command = ["npx", "server-github"]
isolation = "host"
imps = ["yuko"]
env = { GITHUB_TOKEN = "github" }
[mcp.files]
command = ["node", "index.js"]
rootfs = "/srv/mcp"
start = "eager"
idle = "30s"
shared = true
`))
	if err != nil {
		t.Fatal(err)
	}
	gh, files := o.MCP["gh"], o.MCP["files"]
	if gh.Isolation != IsolationHost || gh.Start != StartLazy || gh.Idle.Duration != DefaultMCPIdle || gh.Env["GITHUB_TOKEN"] != "github" || !gh.Allows("yuko") || gh.Allows("ada") {
		t.Errorf("gh: %+v", gh)
	}
	if files.Isolation != IsolationBox || files.Start != StartEager || files.Idle.Duration != 30*time.Second || !files.Shared {
		t.Errorf("files: %+v", files)
	}
	if name, s := o.MCPServerFor("mcp.gh"); name != "gh" || s != gh {
		t.Errorf("MCPServerFor(mcp.gh) = %s %v", name, s)
	}
	if _, s := o.MCPServerFor("email-send"); s != nil {
		t.Error("an intent without the mcp. prefix names a server")
	}

	host := "[mcp.x]\ncommand = [\"srv\"]\nisolation = \"host\"\n"
	for _, tc := range []struct{ toml, want string }{
		{"[mcp.x]\nisolation = \"host\"\n", `command must name the server's program`},
		{"[mcp.x]\ncommand = [\"\"]\nisolation = \"host\"\n", `command must name the server's program`},
		{"[mcp.\"../x\"]\ncommand = [\"srv\"]\nisolation = \"host\"\n", `[mcp.../x]`},
		{host + "imps = [\"../yuko\"]\n", `key "imps"`},
		{host + "env = { \"BAD-NAME\" = \"s\" }\n", `is not an environment variable name`},
		{host + "env = { TOKEN = \"../keys/gateway.key\" }\n", `env TOKEN must name a file in IMPYARD_HOME/secrets`},
		{host + "env = { TOKEN = \".hidden\" }\n", `env TOKEN must name a file in IMPYARD_HOME/secrets`},
		{"[mcp.x]\ncommand = [\"srv\"]\n", `a boxed server needs image or rootfs`},
		{"[mcp.x]\ncommand = [\"srv\"]\nimage = \"a\"\nrootfs = \"/b\"\n", `a boxed server needs image or rootfs, one of them`},
		{"[mcp.x]\ncommand = [\"srv\"]\nrootfs = \"rel\"\n", `rootfs must be an absolute path`},
		{host + "image = \"a\"\n", `not isolation = "host"`},
		{"[mcp.x]\ncommand = [\"srv\"]\nisolation = \"vm\"\n", `unknown isolation "vm"`},
		{"[mcp.x]\ncommand = [\"srv\"]\nimage = \"a\"\nruntime = \"kata\"\n", `unknown runtime "kata"`},
		{host + "start = \"now\"\n", `unknown start "now"`},
		{host + "idle = \"-1s\"\n", `negative`},
		{host + "verbose = true\n", `unknown key "mcp.x.verbose"`},
		{host + "[executors.\"mcp.x\"]\nkind = \"http\"\nurl = \"https://a\"\n", `mcp.x is built in`},
	} {
		if _, err := ParseOrg("org.toml", []byte(tc.toml)); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "org.toml") {
			t.Errorf("%q: got %v, want %q", tc.toml, err, tc.want)
		}
	}
}
