package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/payload"
)

// MCP server isolations and start modes ([mcp.<name>]).
const (
	IsolationBox  = "box"
	IsolationHost = "host"
	StartLazy     = "lazy"
	StartEager    = "eager"
)

// MCP is the executor kind of a gated MCP tool call: impexec makes the
// call on the server the gate names. It is built in, like trust-promote:
// the intent of such a gate is MCPIntentPrefix + the server's name.
const (
	MCP             = "mcp"
	MCPIntentPrefix = "mcp."
)

// DefaultMCPIdle is how long a server runs with no call before it is
// stopped, when its entry names no idle.
const DefaultMCPIdle = 10 * time.Minute

// MCPServer is [mcp.<name>]: a stdio MCP server the gateway serves to
// boxes at https://mcp.impyard/<name>.
type MCPServer struct {
	// Command is the server's argv, run with the working directory and
	// environment the gateway gives it (see Env).
	Command []string `toml:"command"`
	// Image or Rootfs is what a boxed server runs in.
	Image  string `toml:"image"`
	Rootfs string `toml:"rootfs"`
	// Env maps an environment variable of the server's process to the
	// file in IMPYARD_HOME/secrets/ holding its value.
	Env map[string]string `toml:"env"`
	// Imps may call the server; no one else may.
	Imps    []string `toml:"imps"`
	Runtime string   `toml:"runtime"`
	// Isolation is box (the default) or host: host runs Command directly
	// on the host, trusting the server fully.
	Isolation string   `toml:"isolation"`
	Start     string   `toml:"start"`
	Idle      Duration `toml:"idle"`
	// Shared lets one process serve every imp; otherwise each imp gets
	// its own.
	Shared bool `toml:"shared"`
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// MCPServerFor returns the server a gate's intent names (mcp.<name>),
// or nil.
func (o *Org) MCPServerFor(intent string) (string, *MCPServer) {
	name, ok := strings.CutPrefix(intent, MCPIntentPrefix)
	if !ok {
		return "", nil
	}
	return name, o.MCP[name]
}

// MCPExecutor is the built-in executor of every mcp.<name> intent: no
// [executors] entry configures it, and none may. A tool call may act on
// the world, so it is not idempotent.
var MCPExecutor = &Executor{Kind: MCP}

// MCPFields are the fields of a gated call's payload, as the door files
// it: a trust entry matches server and tool, and the arguments by path
// ("arguments.path" = "glob").
var MCPFields = payload.Fields{"server": payload.Line, "tool": payload.Line, "arguments": payload.Object}

// Allows says whether imp may call the server.
func (s *MCPServer) Allows(imp string) bool { return slices.Contains(s.Imps, imp) }

func (o *Org) checkMCP(p string, b []byte) error {
	for name, s := range o.MCP {
		if err := id.CheckName(name); err != nil {
			return bad(p, b, name, "[mcp.%s]: %v", name, err)
		}
		if s == nil || len(s.Command) == 0 || s.Command[0] == "" {
			return bad(p, b, "command", "[mcp.%s]: command must name the server's program", name)
		}
		for _, imp := range s.Imps {
			if err := id.CheckName(imp); err != nil {
				return bad(p, b, "imps", "[mcp.%s]: %v", name, err)
			}
		}
		for v, secret := range s.Env {
			if !envName.MatchString(v) {
				return bad(p, b, v, "[mcp.%s]: %q is not an environment variable name", name, v)
			}
			if secret == "" || strings.ContainsAny(secret, `/\`) || strings.HasPrefix(secret, ".") {
				return bad(p, b, v, "[mcp.%s]: env %s must name a file in IMPYARD_HOME/secrets", name, v)
			}
		}
		switch s.Isolation {
		case "", IsolationBox:
			if (s.Image == "") == (s.Rootfs == "") {
				return bad(p, b, "isolation", "[mcp.%s]: a boxed server needs image or rootfs, one of them", name)
			}
		case IsolationHost:
			if s.Image != "" || s.Rootfs != "" || s.Runtime != "" {
				return bad(p, b, "isolation", "[mcp.%s]: image, rootfs and runtime are for boxed servers, not isolation = \"host\"", name)
			}
		default:
			return bad(p, b, "isolation", "[mcp.%s]: unknown isolation %q (want box or host)", name, s.Isolation)
		}
		if s.Rootfs != "" && !strings.HasPrefix(s.Rootfs, string(os.PathSeparator)) {
			return bad(p, b, "rootfs", "[mcp.%s]: rootfs must be an absolute path", name)
		}
		if err := checkRuntime(p, b, s.Runtime); err != nil {
			return err
		}
		switch s.Start {
		case "", StartLazy, StartEager:
		default:
			return bad(p, b, "start", "[mcp.%s]: unknown start %q (want lazy or eager)", name, s.Start)
		}
		if e := o.Executors[MCPIntentPrefix+name]; e != nil {
			return bad(p, b, MCPIntentPrefix+name, "%s%s is built in: impexec performs the gated calls of [mcp.%s], no executor is configured for it", MCPIntentPrefix, name, name)
		}
	}
	return nil
}

func (o *Org) mcpDefaults() {
	for _, s := range o.MCP {
		if s.Isolation == "" {
			s.Isolation = IsolationBox
		}
		if s.Start == "" {
			s.Start = StartLazy
		}
		if s.Idle.Duration == 0 {
			s.Idle.Duration = DefaultMCPIdle
		}
	}
}
