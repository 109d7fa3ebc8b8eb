package config

import (
	"strings"
	"testing"
)

const discordKey = "8f1c0b5d2a3e4f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"

func TestInbound(t *testing.T) {
	o, err := LoadOrg(yardWith(t, `[inbound]
listen = "127.0.0.1:7400"
[[inbound.source]]
name = "github"
imp = "yuko"
kind = "hmac-sha256"
secret = "github-hook"
[[inbound.source]]
name = "chat"
imp = "yuko"
kind = "discord"
public_key = "`+discordKey+`"
owners = ["80351110224678912"]
`))
	if err != nil {
		t.Fatal(err)
	}
	gh := o.Inbound.Source("github")
	if gh == nil || gh.Header != DefaultSignatureHeader || gh.DeliveryHeader != DefaultDeliveryHeader || gh.Secret != "github-hook" {
		t.Errorf("github source %+v", gh)
	}
	if d := o.Inbound.Source("chat"); d == nil || d.Header != "" || d.Owners[0] != "80351110224678912" {
		t.Errorf("discord source %+v", d)
	}
	if in := o.Inbound; in.ConnsPerClient != DefaultConnsPerClient || in.MinBodyRate != DefaultMinBodyRate || in.HeaderTimeout.Duration != DefaultInboundHeaderTimeout {
		t.Errorf("slow-sender limits %d %d %v, want the defaults", in.ConnsPerClient, in.MinBodyRate, in.HeaderTimeout)
	}
	if o.Inbound.Source("nope") != nil {
		t.Error("a source that is not configured was found")
	}
	src := func(body string) string {
		return "[inbound]\nlisten = \"127.0.0.1:7400\"\n[[inbound.source]]\n" + body
	}
	for _, tc := range []struct{ toml, want string }{
		{"[[inbound.source]]\nname = \"gh\"\nimp = \"yuko\"\nkind = \"hmac-sha256\"\nsecret = \"s\"\n", `need [inbound] listen`},
		{src("name = \"../x\"\nimp = \"yuko\"\nkind = \"hmac-sha256\"\nsecret = \"s\"\n"), `key "name": [[inbound.source]] #1`},
		{src("name = \"gh\"\nimp = \"yuko\"\nkind = \"hmac-sha256\"\nsecret = \"s\"\n[[inbound.source]]\nname = \"gh\"\nimp = \"yuko\"\nkind = \"hmac-sha256\"\nsecret = \"s\"\n"), `a second source is called "gh"`},
		{src("name = \"gh\"\nkind = \"hmac-sha256\"\nsecret = \"s\"\n"), `key "imp": [[inbound.source]] #1 (gh)`},
		{src("name = \"gh\"\nimp = \"yuko\"\nkind = \"hmac-sha256\"\n"), `secret must name a file in IMPYARD_HOME/secrets`},
		{src("name = \"gh\"\nimp = \"yuko\"\nkind = \"hmac-sha256\"\nsecret = \"../keys/gateway.key\"\n"), `secret must name a file`},
		{src("name = \"gh\"\nimp = \"yuko\"\nkind = \"hmac-sha256\"\nsecret = \"s\"\nowners = [\"1\"]\n"), `public_key and owners are for discord sources`},
		{src("name = \"d\"\nimp = \"yuko\"\nkind = \"discord\"\npublic_key = \"abcd\"\nowners = [\"1\"]\n"), `64 hex digits`},
		{src("name = \"d\"\nimp = \"yuko\"\nkind = \"discord\"\npublic_key = \"" + discordKey + "\"\n"), `name the Discord user ids`},
		{src("name = \"d\"\nimp = \"yuko\"\nkind = \"discord\"\npublic_key = \"" + discordKey + "\"\nowners = [\"1\"]\nsecret = \"s\"\n"), `are for hmac-sha256 sources`},
		{src("name = \"d\"\nimp = \"yuko\"\nkind = \"discord\"\npublic_key = \"" + discordKey + "\"\nowners = [\"alice\"]\n"), `"alice" is not a Discord user id`},
		{src("name = \"d\"\nimp = \"yuko\"\nkind = \"slack\"\n"), `kind "slack" is not hmac-sha256 or discord`},
		{src("name = \"d\"\nimp = \"yuko\"\nkind = \"discord\"\nsignature = \"x\"\n"), `unknown key "inbound.source.signature"`},
		{"[inbound]\nlisten = \"127.0.0.1:7400\"\ntls_cert = \"relay.crt\"\n", `tls_cert and tls_key go together`},
		{"[inbound]\nlisten = \"127.0.0.1:7400\"\ntls_key = \"relay.key\"\n", `tls_cert and tls_key go together`},
		{"[inbound]\ntls_cert = \"relay.crt\"\ntls_key = \"relay.key\"\n", `tls_cert needs listen`},
		{"[inbound]\nlisten = \"127.0.0.1:7400\"\nconns_per_client = 9\n", `org.toml:3: key "conns_per_client": [inbound] conns_per_client must be 1 to 8 (half the relay's delivery slots), not 9`},
		{"[inbound]\nlisten = \"127.0.0.1:7400\"\nconns_per_client = -1\n", `conns_per_client must be 1 to 8`},
		{"[inbound]\nlisten = \"127.0.0.1:7400\"\nmin_body_rate = -5\n", `org.toml:3: key "min_body_rate": [inbound] min_body_rate must be positive`},
		{"[inbound]\nlisten = \"127.0.0.1:7400\"\nheader_timeout = \"soon\"\n", `org.toml:3: key "inbound.header_timeout"`},
	} {
		if _, err := LoadOrg(yardWith(t, tc.toml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.toml, err, tc.want)
		}
	}
}
