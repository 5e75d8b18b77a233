package contain

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
)

// TestPlanUserns: under MechanismUserns a mount with a mount below it
// is split (its subdirectories overlaid one by one, its symbolic links
// recreated, its files read-only, a left-out mount shown as an empty
// directory), a writable directory gets its own overlay nested in its
// mount's, and nothing under a shared path or a read-only mount does.
func TestPlanUserns(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/b", "a/c/d", "home/u", "tmp", "ro/x", "excl/y"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "a/f"), []byte("x"), 0o644)
	os.Symlink("b", filepath.Join(root, "a/l"))
	p := func(s string) string { return filepath.Join(root, s) }
	mounts := []MountInfo{
		{Path: "/", FSType: "ext4"},
		{Path: p("a"), FSType: "ext4"},            // has a mount below: split
		{Path: p("a/c/d"), FSType: "tmpfs"},       // the mount below
		{Path: p("ro"), FSType: "ext4", RO: true}, // read-only: bound
		{Path: p("excl"), FSType: "tmpfs"},
		{Path: p("excl/y"), FSType: "tmpfs"},
	}
	got := map[string]string{}
	for _, m := range PlanUserns(mounts, nil, []string{p("excl")}, []string{p("home/u"), p("ro/x"), p("tmp"), p("nonexistent")}) {
		if m.Path == "/" || strings.HasPrefix(m.Path, root) {
			got[m.Path] = m.Mode
		}
	}
	want := map[string]string{
		"/": ModeSplit, root: ModeSplit, p("home"): ModeOverlay, p("excl"): ModeSplit, p("a"): ModeSplit, p("a/b"): ModeOverlay, p("a/c"): ModeSplit, p("a/c/d"): ModeOverlay,
		p("a/f"): ModeReadOnly, p("a/l"): ModeSymlink, p("ro"): ModeBind, p("home/u"): ModeOverlay, p("tmp"): ModeOverlay,
	}
	// "/" and root are split (mounts below), home is overlaid (home/u
	// nested in it), excl is a left-out mount: an empty directory.
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan\n got %v\nwant %v", got, want)
	}
}

// TestUsernsChangesAndDiscard: as an unprivileged user (Nobody), a
// contained command's writes to its $HOME (a file, a deletion, a
// directory made, one removed and made again: opaque by user.overlay.*)
// and to /tmp are listed from the upper directories and reach none of
// the real files; a write to a file of another user fails as it would
// outside, one needing a root-owned directory copied up with EOVERFLOW,
// an entry made in / with EROFS; Detect says userns; Discard removes
// the layers.
func TestUsernsChangesAndDiscard(t *testing.T) {
	if fstest.IsNobody() {
		usernsChild(t)
		return
	}
	home := fstest.OwnedDir(t, "home")
	state := fstest.OwnedDir(t, "state")
	os.WriteFile(filepath.Join(home, "old"), []byte("x"), 0o644)
	os.Chown(filepath.Join(home, "old"), fstest.Nobody, fstest.Nobody)
	od := filepath.Join(home, "od") // removed and made again: opaque (user.overlay.opaque)
	os.Mkdir(od, 0o755)
	os.WriteFile(filepath.Join(od, "x"), []byte("x"), 0o644)
	for _, p := range []string{od, filepath.Join(od, "x")} {
		os.Chown(p, fstest.Nobody, fstest.Nobody)
	}
	rootFile := filepath.Join(home, "roots")
	os.WriteFile(rootFile, []byte("root's"), 0o644) // in the user's $HOME, not the user's
	// root's, writable by all: writing in it needs it copied up, which
	// overlayfs refuses for an owner not mapped (EOVERFLOW).
	os.Mkdir(filepath.Join(home, "shared"), 0o777)
	os.Chmod(filepath.Join(home, "shared"), 0o777)
	tmpName := "/tmp/lockstep-userns-" + filepath.Base(filepath.Dir(home))
	t.Cleanup(func() { os.Remove(tmpName) })
	out, errOut, err := fstest.AsNobody(t, t.Name(), []string{"HOME=" + home, "STATE=" + state, "TMPNAME=" + tmpName})
	if err != nil {
		t.Fatalf("child: %v\n%s\n%s", err, out, errOut)
	}
	if i := strings.Index(string(out), "SKIP-USERNS:"); i >= 0 {
		t.Skipf("the kernel refuses an unprivileged user namespace with overlays here: %s", strings.SplitN(string(out[i:]), "\n", 2)[0])
	}
	var res struct {
		Changes     []Change
		Uncontained []Mount
		Discarded   string
		Detect      map[string]string
		Output      string
	}
	i := strings.Index(string(out), "RESULT:")
	if i < 0 {
		t.Fatalf("no result\n%s\n%s", out, errOut)
	}
	if err := json.Unmarshal([]byte(strings.SplitN(string(out[i+7:]), "\n", 2)[0]), &res); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, c := range res.Changes {
		kinds[c.Path] = c.Kind
	}
	for p, k := range map[string]string{home + "/new": "created", home + "/old": "deleted", tmpName: "created", home + "/d": "created", od: "modified", od + "/y": "created"} {
		if kinds[p] != k {
			t.Errorf("%s: %q, want %q (changes %+v; output %s; uncontained %+v)", p, kinds[p], k, res.Changes, res.Output, res.Uncontained)
		}
	}
	// Another user's file in the user's own directory: not writable,
	// removable, as outside.
	if kinds[rootFile] != "deleted" {
		t.Errorf("another user's file in $HOME: %q, want only its removal (as outside): %+v", kinds[rootFile], res.Changes)
	}
	if b, err := os.ReadFile(rootFile); err != nil || string(b) != "root's" {
		t.Errorf("another user's file after the run: %q %v", b, err)
	}
	if !strings.Contains(res.Output, "roots: denied") {
		t.Errorf("writing another user's file: %q, want it refused", res.Output)
	}
	for _, want := range []string{"shared: Value too large", "slash: Read-only file system"} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("output %q: want %q", res.Output, want)
		}
	}
	if res.Detect["auto"] != MechanismUserns || !strings.Contains(res.Detect["root"], "not root") {
		t.Errorf("detect as a user: %v; want auto → userns, root refused", res.Detect)
	}
	if !strings.Contains(res.Output, "uid=65534") {
		t.Errorf("the command's identity: %q, want the user's own uid", res.Output)
	}
	for _, p := range []string{home + "/new", tmpName, home + "/d"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s reached the real filesystem", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(home, "old")); err != nil || string(b) != "x" {
		t.Errorf("the deletion reached the real filesystem: %q %v", b, err)
	}
	if res.Discarded != "" {
		t.Errorf("discard: %s", res.Discarded)
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "contain")); len(ents) != 0 {
		t.Errorf("layers left under the state root: %v", ents)
	}
}

func usernsChild(t *testing.T) {
	if err := AvailableUserns(); err != nil {
		t.Log("SKIP-USERNS:", err)
		os.Stdout.WriteString("SKIP-USERNS: " + err.Error() + "\n")
		return
	}
	home, tmpName := os.Getenv("HOME"), os.Getenv("TMPNAME")
	s, err := Prepare(Options{StateRoot: os.Getenv("STATE"), LayerRoot: os.Getenv("STATE"), Cwd: home, Mechanism: MechanismUserns})
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	script := "id; echo new > $HOME/new && rm $HOME/old && echo t > " + tmpName + " && mkdir $HOME/d && echo f > $HOME/d/f && " +
		"rm -r $HOME/od && mkdir $HOME/od && echo y > $HOME/od/y && " +
		"(echo w >> $HOME/roots 2>/dev/null && echo 'roots: written' || echo 'roots: denied'); " +
		"(echo x > $HOME/shared/x) 2>&1 | sed 's/.*: /shared: /'; rm -f $HOME/roots; (mkdir /lockstep-userns-probe) 2>&1 | sed 's/.*: /slash: /'"
	args := s.Wrap(self, []string{"sh", "-c", script})
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = sysProcAttr(s)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "operation not permitted") || strings.Contains(string(out), "permission denied") {
			os.Stdout.WriteString("SKIP-USERNS: " + strings.TrimSpace(string(out)) + "\n")
			s.Discard()
			return
		}
		t.Fatalf("contained command: %v %s", err, out)
	}
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	detect := map[string]string{}
	for _, m := range []string{MechanismAuto, MechanismRoot} {
		got, err := Detect(m)
		if err != nil {
			got = err.Error()
		}
		detect[m] = got
	}
	res := map[string]any{"Changes": ch, "Output": string(out), "Uncontained": s.Uncontained(), "Detect": detect}
	if err := s.Discard(); err != nil {
		res["Discarded"] = err.Error()
	} else if err := s.Discarded(); err != nil {
		res["Discarded"] = err.Error()
	}
	b, _ := json.Marshal(res)
	os.Stdout.WriteString("RESULT:" + string(b) + "\n")
}
