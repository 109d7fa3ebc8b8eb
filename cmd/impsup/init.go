package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	homedir "github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/signers"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/policies"
)

const initUsage = `usage: impsup init [--group GROUP [--owner USER]] [--json] [DIR]

Make DIR a yard, creating what is missing and replacing nothing. DIR
defaults to --root, else $IMPYARD_ROOT, else the current directory.

  DIR and its directories   queue/ gates/pending/ gates/resolved/ journal/
                            runs/ policies/ imps/
  org.toml                  every setting, commented out (impyard(7))
  policies/gateway.json     the policy impyard ships (impgw(8))
  IMPYARD_HOME/secrets/     mode 0700, empty: the secrets the gateway injects
  IMPYARD_HOME/ca/          the gateway's CA, as 'impgw ca init' makes it
  IMPYARD_HOME/keys/owner.* the key 'impgate approve' signs with
  .impyard-yard             the marker, written last: until it is there no
                            program takes DIR for a yard

Prints one line per thing it created (--json: one object each, none when
it created nothing). A file already there is kept as it is, even one that
differs from what init would write; run on a yard, init creates nothing
and says so; run after an init that was cut short, it finishes it. A DIR
that is not a directory is refused (exit 1). What it creates is writable
by its owner alone, whatever the umask; a DIR, imps/, policies/ or
authority file that another account may write is refused (exit 1), with
no marker written: every daemon would refuse it (impyard-security(7)).

--group shares the yard with GROUP, for daemons that run as root and an
owner who runs impq and impgate as a member of GROUP (impyard(7), "A
yard shared with a group"): DIR, imps/ and policies/ become GROUP's to
read (02750), the work directories GROUP's to write (02770). --owner
makes USER the owner of DIR and of its authority files, to edit them;
the daemons take authority files of root and of DIR's owner only. Both
take a name or a number, need root, and apply to an existing yard too.

Examples:
  impsup init /srv/yard
  sudo impsup init --group impyard --owner alice /srv/yard
  IMPYARD_ROOT=/srv/yard impsup init
  impsup init --json ~/yard | jq -r .path
`

// created is one thing init created.
type created struct {
	What string `json:"what"`
	Path string `json:"path"`
}

func initCmd(e *cli.Env, args []string) error {
	fs := e.FlagSet("init", initUsage)
	e.TimeoutFlag(fs)
	root := fs.String("root", "", "the `DIR` to make a yard, as DIR (default $IMPYARD_ROOT, else the current directory)")
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	group := fs.String("group", "", "share the yard with `GROUP` (impyard(7))")
	owner := fs.String("owner", "", "with --group, make `USER` the owner of the yard and its authority files")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	share := sharing{uid: -1, gid: -1}
	if *owner != "" && *group == "" {
		return cli.Usagef("init: --owner needs --group")
	}
	if *group != "" {
		var err error
		if share.gid, err = lookupID(*group, user.LookupGroup, func(g *user.Group) string { return g.Gid }); err != nil {
			return cli.Usagef("init: --group %s: %v", *group, err)
		}
	}
	if *owner != "" {
		var err error
		if share.uid, err = lookupID(*owner, user.Lookup, func(u *user.User) string { return u.Uid }); err != nil {
			return cli.Usagef("init: --owner %s: %v", *owner, err)
		}
	}
	dir := *root
	switch {
	case fs.NArg() > 1:
		return cli.Usagef("init: want at most one DIR")
	case fs.NArg() == 1 && dir != "":
		return cli.Usagef("init: name the yard with DIR or --root, not both")
	case fs.NArg() == 1:
		dir = fs.Arg(0)
	}
	dir, err := yard.Resolve(dir)
	if err != nil {
		return err
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	made, err := create(dir, home, share)
	for _, m := range made {
		if *asJSON {
			cli.JSONLine(e.Stdout, m)
		} else {
			fmt.Fprintf(e.Stdout, "created %s\n", m.Path)
		}
	}
	if err != nil {
		return err
	}
	if len(made) == 0 && !*asJSON {
		fmt.Fprintf(e.Stdout, "nothing to create: %s is a yard\n", dir)
	}
	return nil
}

// sharing is what --group and --owner asked for: -1 for nothing.
type sharing struct{ uid, gid int }

// lookupID takes name as a number, else looks it up with lookup.
func lookupID[T any](name string, lookup func(string) (T, error), id func(T) string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, nil
	}
	v, err := lookup(name)
	if err != nil {
		return -1, err
	}
	return strconv.Atoi(id(v))
}

// create makes dir a yard with its IMPYARD_HOME, in the order that lets
// an interrupted run be finished by the next: everything else first, the
// marker last, shared as share says. It returns what it created, up to an
// error.
func create(dir, home string, share sharing) (made []created, err error) {
	add := func(what string, paths ...string) {
		for _, p := range paths {
			made = append(made, created{What: what, Path: p})
		}
	}
	y, mkdir, err := yard.Prepare(dir)
	if err != nil {
		return made, err
	}
	if mkdir {
		add("directory", y.Root)
	}
	// A marker that does not read as one is refused before anything is
	// added beside it.
	if _, err := y.Marked(); err != nil {
		return made, err
	}
	dirs, err := y.Skeleton()
	add("directory", dirs...)
	if err != nil {
		return made, err
	}
	imps, ok, err := config.MkImps(y)
	if err != nil {
		return made, err
	}
	if ok {
		add("directory", imps)
	}
	if ok, err := config.CreateOrg(y); err != nil {
		return made, err
	} else if ok {
		add("config", config.OrgPath(y))
	}
	if ok, err := y.CreatePolicy(policies.Gateway); err != nil {
		return made, err
	} else if ok {
		add("policy", y.PolicyPath())
	}
	// secrets/ is where the owner puts what the gateway injects: made
	// here, owner-only, so the first secret is not written into a
	// directory its umask left open.
	h := homedir.Dir(home)
	_, err = os.Lstat(h.Secrets())
	if err := h.Private(h.Secrets()); err != nil {
		return made, err
	}
	if errors.Is(err, fs.ErrNotExist) {
		add("secrets", h.Secrets())
	}
	if _, err := ca.Init(home); err == nil {
		add("ca", ca.KeyPath(home), ca.CertPath(home))
	} else if !errors.Is(err, ca.ErrExists) {
		return made, err
	}
	if k, err := approval.Create(home, approval.Owner); err == nil {
		add("signing-key", k.Path, approval.PubPath(home, approval.Owner))
	} else if !errors.Is(err, approval.ErrExists) {
		return made, err
	}
	// The keys this home verifies approvals with, so that an approver in
	// another IMPYARD_HOME is refused before it signs.
	kr, err := approval.LoadKeyring(home)
	if err != nil {
		return made, err
	}
	if ok, err := signers.Init(y, kr, "impsup"); err != nil {
		return made, err
	} else if ok {
		add("signers", signers.Path(y))
	}
	// The daemons take authority files only in strict modes: whatever
	// the umask (or a default ACL) made of what init created, the way to
	// each is its owner's alone; and a yard whose authority files every
	// daemon would refuse is not marked as one.
	for _, m := range made {
		if m.What != "directory" {
			continue
		}
		if err := os.Chmod(m.Path, 0o750); err != nil {
			return made, err
		}
	}
	if share.gid != -1 {
		dirs, err := y.Share(share.uid, share.gid)
		add("directory", dirs...)
		if err != nil {
			return made, err
		}
	}
	if unsafe := config.Unsafe(y); len(unsafe) > 0 {
		return made, cli.WithHint(unsafe[0], "a directory or file any other account may write would hand it the yard's authority (impyard-security(7))")
	}
	if ok, err := y.Mark(); err != nil {
		return made, err
	} else if ok {
		add("marker", y.Path(yard.Marker))
	}
	return made, nil
}
