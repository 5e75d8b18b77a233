package txrun_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/contain"
	"github.com/lockstep-hq/lockstep/fssnap/instance"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
	"github.com/lockstep-hq/lockstep/fssnap/txrun"
)

// TestUsernsContainedRun: issue 22 without root. An unprivileged user
// (Nobody: CI runs as root, so the test's child drops to it) runs
// contained runs by the userns mechanism. A failed run's writes to its
// $HOME, to /tmp (a file of its own) and to --dir are all gone after
// the rollback, which is verified clean; a successful run with
// --outside keep applies them, as the user. Both reports say
// contain "instance" and name the mechanism.
func TestUsernsContainedRun(t *testing.T) {
	if fstest.IsNobody() {
		usernsRunChild(t)
		return
	}
	// "notmine": the run makes itself a file where the user may not
	// write outside (the top of an overlay shows the user as its owner,
	// so chmod u+w works inside): applying it fails, named in the error,
	// and everything else is still applied.
	notMine := "/opt"
	if fi, err := os.Stat(notMine); err != nil || !fi.IsDir() || fi.Mode()&0o002 != 0 {
		notMine = ""
	}
	for _, tc := range []struct {
		name, exit, extra string
	}{{"failed", "1", ""}, {"succeeded", "0", ""}, {"notmine", "0", notMine}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "notmine" && notMine == "" {
				t.Skip("no /opt of root's here")
			}
			home := fstest.OwnedDir(t, "home")
			dir := fstest.OwnedDir(t, "dir")
			state := fstest.OwnedDir(t, "state")
			for _, f := range []string{filepath.Join(dir, "a.txt"), filepath.Join(home, "keep"), filepath.Join(home, "gone")} {
				os.WriteFile(f, []byte("before\n"), 0o644)
				os.Chown(f, fstest.Nobody, fstest.Nobody)
			}
			tmpName := "/tmp/lockstep-userns-run-" + filepath.Base(filepath.Dir(filepath.Dir(home)))
			t.Cleanup(func() { os.Remove(tmpName) })
			script := "echo h > $HOME/h && echo more >> $HOME/keep && rm $HOME/gone && echo t > " + tmpName +
				" && echo after > a.txt && echo n > new.txt"
			notMinePath := ""
			if tc.extra != "" {
				notMinePath = filepath.Join(tc.extra, filepath.Base(tmpName))
				t.Cleanup(func() { os.Remove(notMinePath) }) // only if applying it wrongly succeeded
				script += " && chmod u+w " + tc.extra + " && echo x > " + notMinePath
			}
			script += " && exit " + tc.exit
			out, errOut, err := fstest.AsNobody(t, "TestUsernsContainedRun", []string{"HOME=" + home, "RUN_DIR=" + dir,
				"STATE=" + state, "SCRIPT=" + script})
			if i := strings.Index(string(out), "SKIP-USERNS:"); i >= 0 {
				t.Skipf("the kernel refuses an unprivileged user namespace with overlays here: %s", strings.SplitN(string(out[i:]), "\n", 2)[0])
			}
			i := strings.Index(string(out), "REPORT:")
			if i < 0 {
				t.Fatalf("no report (%v)\n%s\n%s", err, out, errOut)
			}
			var rep struct {
				txrun.Report
				Err string
			}
			if err := json.Unmarshal([]byte(strings.SplitN(string(out[i+7:]), "\n", 2)[0]), &rep); err != nil {
				t.Fatal(err)
			}
			if notMinePath != "" {
				if !strings.Contains(rep.Err, notMinePath) || !strings.Contains(rep.Err, "permission denied") || rep.OutsideApplied {
					t.Errorf("applying %s as the user: error %q, outside applied %v; want it refused and said", notMinePath, rep.Err, rep.OutsideApplied)
				}
				if _, err := os.Lstat(notMinePath); err == nil {
					t.Errorf("%s was applied", notMinePath)
				}
				rep.Err, rep.OutsideApplied = "", true // the rest as a successful run
			}
			if rep.Err != "" {
				t.Fatalf("run: %s (report %+v)", rep.Err, rep.Report)
			}
			if rep.Contain != txrun.ContainInstance || !strings.HasPrefix(rep.ContainNote, txrun.UsernsNote) {
				t.Errorf("contain %q, note %q: want instance by userns", rep.Contain, rep.ContainNote)
			}
			t.Logf("contain %s: %s; outside %+v; steps %+v", rep.Contain, rep.ContainNote, rep.Outside, rep.Steps)
			outside := map[string]string{}
			for _, c := range rep.Outside {
				outside[c.Path] = c.Kind
			}
			if outside[filepath.Join(home, "h")] != "created" || outside[filepath.Join(home, "keep")] != "modified" ||
				outside[filepath.Join(home, "gone")] != "deleted" || outside[tmpName] != "created" {
				t.Errorf("outside %+v: want $HOME/h, $HOME/keep, $HOME/gone and %s", rep.Outside, tmpName)
			}
			_, goneErr := os.Lstat(filepath.Join(home, "gone"))
			if (goneErr == nil) != (tc.exit == "1") {
				t.Errorf("$HOME/gone after the %s run: %v", tc.name, goneErr)
			}
			read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
			if tc.exit == "1" {
				if rep.Succeeded || !rep.RolledBack || !rep.Purity.Checked || !rep.Purity.Clean || !rep.Purity.Instance {
					t.Errorf("failed run: succeeded %v, rolled back %v, purity %+v, residue %+v", rep.Succeeded, rep.RolledBack, rep.Purity, rep.Residue)
				}
				for _, st := range rep.Steps {
					if st.Name == "forensics" && st.Error != "" {
						t.Errorf("the failed run's record (its layers copied as the user): %s", st.Error)
					}
				}
				if rep.Forensics == "" {
					t.Error("no forensics record of the failed run")
				} else if b, err := os.ReadFile(filepath.Join(rep.Forensics, "upper", "mounts.json")); err != nil || !strings.Contains(string(b), home) {
					t.Errorf("the record's layers: %s %v; want $HOME's among them", b, err)
				}
				for _, p := range []string{filepath.Join(home, "h"), tmpName, filepath.Join(dir, "new.txt")} {
					if _, err := os.Lstat(p); err == nil {
						t.Errorf("%s survived the failed run", p)
					}
				}
				if read(filepath.Join(dir, "a.txt")) != "before\n" || read(filepath.Join(home, "keep")) != "before\n" {
					t.Errorf("a.txt %q, $HOME/keep %q: want both as before", read(filepath.Join(dir, "a.txt")), read(filepath.Join(home, "keep")))
				}
			} else {
				if !rep.Succeeded || !rep.OutsideApplied {
					t.Errorf("succeeded %v, outside applied %v (steps %+v)", rep.Succeeded, rep.OutsideApplied, rep.Steps)
				}
				for p, want := range map[string]string{filepath.Join(home, "h"): "h\n", filepath.Join(home, "keep"): "before\nmore\n", tmpName: "t\n",
					filepath.Join(dir, "a.txt"): "after\n", filepath.Join(dir, "new.txt"): "n\n"} {
					if got := read(p); got != want {
						t.Errorf("%s: %q, want %q", p, got, want)
					}
				}
				if fi, err := os.Stat(tmpName); err != nil || fi.Sys().(*syscall.Stat_t).Uid != fstest.Nobody {
					t.Errorf("%s: applied as %v, want the user's (%v)", tmpName, fi.Sys(), err)
				}
			}
			if ents, _ := os.ReadDir(filepath.Join(state, "contain")); len(ents) != 0 {
				t.Errorf("layers left under the state root: %v", ents)
			}
		})
	}
}

func usernsRunChild(t *testing.T) {
	if err := contain.AvailableUserns(); err != nil {
		os.Stdout.WriteString("SKIP-USERNS: " + err.Error() + "\n")
		return
	}
	home, dir, state := os.Getenv("HOME"), os.Getenv("RUN_DIR"), os.Getenv("STATE")
	icfg := instance.Defaults(home)
	icfg.CrontabDir, icfg.AtSpool = "", "" // the system's spools: not this test's
	rep, err := txrun.Run(context.Background(), txrun.Options{Dir: dir, Args: []string{"sh", "-c", os.Getenv("SCRIPT")},
		Snap: fssnap.Options{StateRoot: state}, Contain: txrun.ContainInstance, ContainMechanism: contain.MechanismUserns,
		Outside: txrun.OutsideKeep, Instance: &icfg, ContainLayerRoot: state, Forensics: filepath.Join(state, "forensics")}) // not /dev/shm: nothing outside the test's directories
	res := struct {
		*txrun.Report
		Err string
	}{Report: rep}
	if err != nil {
		res.Err = err.Error()
	}
	b, _ := json.Marshal(res)
	os.Stdout.WriteString("REPORT:" + string(b) + "\n")
}
