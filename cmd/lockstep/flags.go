package main

import (
	"errors"
	"flag"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// flagger declares flags whose defaults come from the environment.
type flagger struct {
	fs      *flag.FlagSet
	getenv  func(string) string
	errs    []error
	pos     []string
	name    string    // "checkpoint", "keys create"
	client  bool      // the client flags are declared (help names them in one line)
	stdout  io.Writer // -h
	stderr  io.Writer // errors
	parsing bool      // inside fs.Parse: its calls of Usage print nothing
	// counts are the numeric flags (i64, int, dur): none takes a
	// negative value (0 is each one's "off", "none" or "unlimited").
	counts []countFlag
}

// countFlag is a numeric flag's name, variable and value check.
type countFlag struct {
	name, env string
	negative  func() (bool, string)
}

func (f *flagger) str(p *string, name, env, def, help string) {
	f.fs.StringVar(p, name, envOr(f.getenv, env, def), help+" (env "+env+")")
}

// secret declares a flag whose value must never be shown: `-h` prints
// the environment variable's name as its default, not its value.
func (f *flagger) secret(p *string, name, env, help string) {
	f.str(p, name, env, "", help)
	if *p != "" {
		f.fs.Lookup(name).DefValue = "$" + env
	}
}

// url declares a URL flag whose `-h` default hides a password in it.
func (f *flagger) url(p *string, name, env, def, help string) {
	f.str(p, name, env, def, help)
	if u, err := url.Parse(*p); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			f.fs.Lookup(name).DefValue = u.Redacted()
		}
	}
}

func (f *flagger) i64(p *int64, name, env string, def int64, help string) {
	v, err := strconv.ParseInt(envOr(f.getenv, env, strconv.FormatInt(def, 10)), 10, 64)
	if err != nil {
		f.envError(env, "an integer")
	}
	f.fs.Int64Var(p, name, v, help+" (env "+env+")")
	f.counts = append(f.counts, countFlag{name, env, func() (bool, string) { return *p < 0, strconv.FormatInt(*p, 10) }})
}

func (f *flagger) int(p *int, name, env string, def int, help string) {
	v, err := strconv.Atoi(envOr(f.getenv, env, strconv.Itoa(def)))
	if err != nil {
		f.envError(env, "an integer")
	}
	f.fs.IntVar(p, name, v, help+" (env "+env+")")
	f.counts = append(f.counts, countFlag{name, env, func() (bool, string) { return *p < 0, strconv.Itoa(*p) }})
}

func (f *flagger) bool(p *bool, name, env string, def bool, help string) {
	v, err := strconv.ParseBool(envOr(f.getenv, env, strconv.FormatBool(def)))
	if err != nil {
		f.envError(env, "true or false")
	}
	f.fs.BoolVar(p, name, v, help+" (env "+env+")")
}

func (f *flagger) dur(p *time.Duration, name, env string, def time.Duration, help string) {
	v, err := time.ParseDuration(envOr(f.getenv, env, def.String()))
	if err != nil {
		f.envError(env, "a duration such as 500ms, 30s, 5m or 1h")
	}
	f.fs.DurationVar(p, name, v, help+" (env "+env+")")
	f.counts = append(f.counts, countFlag{name, env, func() (bool, string) { return *p < 0, p.String() }})
}

// envError records that the environment variable env does not hold
// what its flag takes (want); the flag keeps its default until then.
func (f *flagger) envError(env, want string) {
	f.errs = append(f.errs, lockstep.Errorf(lockstep.EINVALID, "%s must be %s, got %q", env, want, f.getenv(env)))
}

// parse accepts flags before and after positional arguments
// (`lockstep push DIR --repo R`); "--" ends flag parsing.
func (f *flagger) parse(args []string) error {
	var pos []string
	for {
		f.parsing = true
		err := f.fs.Parse(args)
		f.parsing = false
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.printHelp(f.stdout)
				return exitError(0)
			}
			// One line with the nearest flag and the usage on stderr;
			// under --json the caller also gets the envelope.
			return f.flagFailure(err)
		}
		rest := f.fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	f.pos = pos
	for _, c := range f.counts {
		if neg, v := c.negative(); neg {
			// Refused, not taken as the default: a mistyped sign must
			// not silently become another setting.
			f.errs = append(f.errs, lockstep.Errorf(lockstep.EINVALID, "--%s (%s) must not be negative, got %s", c.name, c.env, v))
		}
	}
	return errors.Join(f.errs...)
}

func newFlagger(name string, e *env) *flagger {
	fs := flag.NewFlagSet("lockstep "+name, flag.ContinueOnError)
	// The flag package's own messages and usage are replaced by ours
	// (help.go): help on stdout, one-line errors with a suggestion.
	fs.SetOutput(io.Discard)
	f := &flagger{fs: fs, getenv: e.getenv, name: name, stdout: e.stdout, stderr: e.stderr}
	fs.Usage = func() {
		if !f.parsing {
			f.printHelp(e.stderr)
		}
	}
	return f
}
