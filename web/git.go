package web

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/repositories"
)

// Git smart HTTP. Fetches and clones are served by the real `git
// upload-pack --stateless-rpc` on the network's repository with
// GIT_NAMESPACE set to the repository, so protocol v2, shallow and partial
// clones work as with any git server; it reads the on-disk ref mirror.
// The ref advertisement itself (v0 info/refs, v2 ls-refs) is answered
// from the store, whose cost does not grow with the fork network.
// Pushes are NOT handed to git receive-pack (which would move refs
// unconditionally, behind the store's back): we advertise refs from the
// store, parse the commands and the pack ourselves, validate and store the
// objects, then move each ref by compare-and-swap against the client's old
// oid, with permissions and an operations-log entry — the same path as
// every other write.

func (s *Server) gitRepo(c *gin.Context) (string, bool) {
	name := strings.TrimSuffix(c.Param("repo"), ".git")
	if err := lockstep.ValidateName("repository name", name); err != nil {
		gitAdvertiseError(c, err)
		return "", false
	}
	return name, true
}

func (s *Server) handleGitInfoRefs() gin.HandlerFunc {
	return func(c *gin.Context) {
		name, ok := s.gitRepo(c)
		if !ok {
			return
		}
		svc := c.Query("service")
		switch svc {
		case "git-upload-pack":
			s.gitUploadPackAdvertise(c, name)
		case "git-receive-pack":
			s.gitReceivePackAdvertise(c, name)
		default:
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "only smart HTTP is served: ?service=git-upload-pack or git-receive-pack"))
		}
	}
}

// gitProtocol is the request's Git-Protocol header as git gets it. A
// scoped key is served protocol v0 (git falls back to it): v2's
// upload-pack gives out any object of the fork network by its id (every
// workspace's: GIT_NAMESPACE is no boundary), v0's stateless upload-pack
// only what the namespace's refs reach.
func gitProtocol(c *gin.Context) string {
	if k := caller(c); k != nil && k.Scope != nil {
		return ""
	}
	return c.GetHeader("Git-Protocol")
}

func noCache(c *gin.Context) {
	c.Header("Cache-Control", "no-cache, max-age=0, must-revalidate")
	c.Header("Expires", "Fri, 01 Jan 1980 00:00:00 GMT")
	c.Header("Pragma", "no-cache")
}

func (s *Server) gitCommand(c *gin.Context, repoName string, args ...string) (*exec.Cmd, error) {
	r, err := s.Repos.Repo(c.Request.Context(), repoName)
	if err != nil {
		return nil, err
	}
	n, err := s.Repos.PrepareGit(c.Request.Context(), r)
	if err != nil {
		return nil, err
	}
	// The request's context ends when the client goes away or stops
	// reading (writelimits.go): git is killed then, and its pipes closed.
	cmd := exec.CommandContext(c.Request.Context(), "git", args...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Dir = n.Dir()
	cmd.Env = append(os.Environ(), "GIT_NAMESPACE="+r.Name, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	if p := gitProtocol(c); p != "" && len(p) < 256 {
		cmd.Env = append(cmd.Env, "GIT_PROTOCOL="+p)
	}
	cmd.Args = append(cmd.Args, n.Dir())
	return cmd, nil
}

// gitUploadPackAdvertise answers a fetch's ref advertisement. Protocol v2
// asks only for git's capabilities (no refs: git answers them without a
// ref scan). The v0 advertisement is built from the store's refs, not by
// git upload-pack: git scans the loose refs of every repository of the
// fork network to list one namespace (18 ms at 10,000 workspaces), the
// store answers in the same time at any size. Its capabilities are those
// of the installed git upload-pack, learned from its first answer.
func (s *Server) gitUploadPackAdvertise(c *gin.Context, name string) {
	v2 := strings.Contains(gitProtocol(c), "version=2")
	var buf bytes.Buffer
	if !v2 {
		writePkt(&buf, "# service=git-upload-pack\n")
		buf.WriteString("0000")
	}
	learned := s.gitCaps.caps("") != ""
	if v2 || !learned {
		cmd, err := s.gitCommand(c, name, "-c", uploadPackFilter(v2), "upload-pack", "--stateless-rpc", "--advertise-refs")
		if err != nil {
			gitAdvertiseError(c, err)
			return
		}
		out, err := cmd.Output()
		if err != nil {
			gitAdvertiseError(c, fmt.Errorf("git upload-pack --advertise-refs: %w", err))
			return
		}
		if !v2 {
			// The refs come from the store on this answer too (git's
			// list is the on-disk mirror's: a stray ref, or not the
			// refs the mirror failed to write); git's own answer is
			// served only while no capabilities could be learned (an
			// unborn HEAD has no symref to learn them from).
			s.gitCaps.learn(out)
			learned = s.gitCaps.caps("") != ""
		}
		if v2 || !learned {
			buf.Write(out)
		}
	}
	if !v2 && learned {
		head, refs, err := s.Repos.GitRefs(c.Request.Context(), name)
		if err != nil {
			gitAdvertiseError(c, err)
			return
		}
		caps := s.gitCaps.caps(head)
		first := true
		line := func(oid, ref string) {
			if first {
				ref += "\x00" + caps
				first = false
			}
			writePkt(&buf, oid+" "+ref+"\n")
		}
		for _, r := range refs {
			if r.Name == head {
				line(r.OID, "HEAD")
			}
		}
		for _, r := range refs {
			line(r.OID, r.Name)
			if r.Peeled != "" {
				writePkt(&buf, r.Peeled+" "+r.Name+"^{}\n")
			}
		}
		buf.WriteString("0000")
	}
	noCache(c)
	c.Data(http.StatusOK, "application/x-git-upload-pack-advertisement", buf.Bytes())
}

// deepenNotReader passes a fetch request to git upload-pack with each
// "deepen-not NAME" (git clone --shallow-exclude=NAME) of its first
// section, up to the first flush, naming the ref in the repository's
// namespace: git resolves the name among the refs outside any namespace
// (none, under GIT_NAMESPACE) and died "ambiguous deepen-not". A name
// that is no single ref of the repository becomes one that cannot exist
// in its namespace (git refuses it; the caller says why), never a ref of
// another repository of the fork network (refs/namespaces/other/…). The
// rest of the request passes through unread.
type deepenNotReader struct {
	br         *bufio.Reader
	repo       string
	resolve    func(name string) (string, bool)
	pending    []byte
	done       bool
	mu         sync.Mutex // unresolved is read by the handler; Read runs in exec's copying goroutine
	unresolved []string
}

// firstUnresolved returns the first deepen-not name that named no single
// ref of the repository, or "".
func (d *deepenNotReader) firstUnresolved() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.unresolved) == 0 {
		return ""
	}
	return d.unresolved[0]
}

func (d *deepenNotReader) Read(p []byte) (int, error) {
	for len(d.pending) == 0 && !d.done {
		hdr, err := d.br.Peek(4)
		if err != nil {
			d.done = true // git reports the truncated request
			break
		}
		n, err := strconv.ParseUint(string(hdr), 16, 16)
		if err != nil || n == 0 {
			d.done = true // malformed (git says so), or the flush: pass through
			break
		}
		if n < 4 { // delimiter (0001) or response-end (0002)
			d.pending = []byte(string(hdr))
			d.br.Discard(4)
			continue
		}
		pkt, err := d.br.Peek(int(n))
		if err != nil {
			d.done = true
			break
		}
		line := string(pkt[4:])
		if name, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "deepen-not "); ok {
			ref, ok := d.resolve(name)
			if !ok {
				d.mu.Lock()
				d.unresolved = append(d.unresolved, name)
				d.mu.Unlock()
				ref = "refs/namespaces/" + d.repo + "/refs/heads/..unresolved" // ".." is never in a ref name
			}
			line = "deepen-not " + ref + "\n"
		}
		d.pending = fmt.Appendf(nil, "%04x%s", len(line)+4, line)
		d.br.Discard(int(n))
	}
	if len(d.pending) > 0 {
		k := copy(p, d.pending)
		d.pending = d.pending[k:]
		return k, nil
	}
	return d.br.Read(p)
}

// namespacedRef resolves name as git's expand_ref does (name, refs/name,
// refs/tags/name, refs/heads/name, refs/remotes/name,
// refs/remotes/name/HEAD; HEAD is the default branch) among a
// repository's refs and returns the one match's full name in the
// repository's namespace; no match or several: false.
func namespacedRef(repo, head string, refs []repositories.AdvertisedRef, name string) (string, bool) {
	have := map[string]bool{}
	for _, r := range refs {
		have[r.Name] = true
	}
	var found []string
	if name == "HEAD" && head != "" && have[head] {
		found = append(found, head)
	}
	for _, f := range []string{"%s", "refs/%s", "refs/tags/%s", "refs/heads/%s", "refs/remotes/%s", "refs/remotes/%s/HEAD"} {
		if r := fmt.Sprintf(f, name); have[r] {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		return "", false
	}
	return "refs/namespaces/" + repo + "/" + found[0], true
}

// uploadPackRefusal is git upload-pack's own reason for refusing a
// request ("fatal: git upload-pack: ambiguous deepen-not: deepen-not
// x"), without the "fatal: " prefix; "" for any other failure (paths and
// internals stay in the log).
func uploadPackRefusal(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if msg, ok := strings.CutPrefix(l, "fatal: git upload-pack: "); ok {
			return "git upload-pack: " + oneLine(msg)
		}
	}
	return ""
}

// uploadPackFilter is git's setting for partial clone (--filter). Only
// protocol v2 offers it: a partial clone later fetches the blobs it
// skipped by their ids, which v2's upload-pack serves and v0's refuses
// unless they are ref tips ("Server does not allow request for
// unadvertised object"), so a v0 partial clone (every scoped key's) would
// fail at its checkout. Without the capability, git says "filtering not
// recognized by server, ignoring" and clones everything.
func uploadPackFilter(v2 bool) string {
	if v2 {
		return "uploadpack.allowFilter=true"
	}
	return "uploadpack.allowFilter=false"
}

// gitCaps remembers the capabilities git upload-pack advertises in
// protocol v0, split around the per-repository symref: before + " symref=HEAD:<ref>" + after.
type gitCaps struct {
	mu            sync.Mutex
	before, after string
}

// caps returns the capability string for a repository whose HEAD is head
// (a full branch name, "" when unborn), or "" when none was learned yet.
func (g *gitCaps) caps(head string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.before == "" {
		return ""
	}
	if head == "" {
		return g.before + g.after
	}
	return g.before + " symref=HEAD:" + head + g.after
}

// learn takes the capabilities from the first line of a v0 advertisement
// ("<oid> HEAD\0<capabilities>\n"); only one with a symref is used.
func (g *gitCaps) learn(adv []byte) {
	if len(adv) < 4 {
		return
	}
	n, err := strconv.ParseUint(string(adv[:4]), 16, 16)
	if err != nil || n <= 4 || int(n) > len(adv) {
		return
	}
	_, caps, ok := strings.Cut(strings.TrimSuffix(string(adv[4:n]), "\n"), "\x00")
	if !ok {
		return
	}
	// Tokens before the first symref and after it, other symrefs dropped.
	var before, after []string
	seen := false
	for _, cp := range strings.Fields(caps) {
		switch {
		case strings.HasPrefix(cp, "symref="):
			seen = true
		case seen:
			after = append(after, " "+cp)
		default:
			before = append(before, cp)
		}
	}
	if !seen || len(before) == 0 {
		return
	}
	g.mu.Lock()
	g.before, g.after = strings.Join(before, " "), strings.Join(after, "")
	g.mu.Unlock()
}

func requestBody(c *gin.Context) (io.Reader, error) {
	if c.GetHeader("Content-Encoding") == "gzip" {
		return gzip.NewReader(c.Request.Body)
	}
	return c.Request.Body, nil
}

func (s *Server) handleGitUploadPack() gin.HandlerFunc {
	return func(c *gin.Context) {
		name, ok := s.gitRepo(c)
		if !ok {
			return
		}
		body, err := requestBody(c)
		if err != nil {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "bad gzip body: %v", err))
			return
		}
		// Large enough to peek at any pkt-line (at most 65520 bytes).
		br := bufio.NewReaderSize(body, 64<<10)
		// Protocol v2's ls-refs is answered from the store (see
		// gitUploadPackAdvertise); fetch and the rest go to git.
		if head, _ := br.Peek(len("0014command=ls-refs\n")); string(head) == "0014command=ls-refs\n" {
			s.gitLsRefs(c, name, br)
			return
		}
		args := []string{"-c", uploadPackFilter(strings.Contains(gitProtocol(c), "version=2"))}
		present, err := s.Repos.ScopedPresence(c.Request.Context(), name)
		if err != nil {
			writeError(c, err)
			return
		}
		var in io.Reader
		var refused chan error
		var dn *deepenNotReader
		if present != nil {
			// A scoped key (served protocol v0, see gitProtocol): git
			// checks its wants against the namespace's refs but trusts the
			// rest of the request (scopedUploadRequest), and a sparse:oid
			// filter reads any blob of the network as patterns.
			args = append(args, "-c", "uploadpackfilter.sparse:oid.allow=false")
			pr, pw := io.Pipe()
			defer pr.Close()
			refused = make(chan error, 1)
			go func() {
				err := scopedUploadRequest(br, pw, present)
				if e, ok := err.(*scopedRefusal); ok {
					refused <- e
				}
				pw.CloseWithError(err)
			}()
			in = pr
		} else {
			// deepen-not names a ref of this repository (git would look
			// it up outside the namespace).
			dn = &deepenNotReader{br: br, repo: name, resolve: func(ref string) (string, bool) {
				head, refs, err := s.Repos.GitRefs(c.Request.Context(), name)
				if err != nil {
					return "", false
				}
				return namespacedRef(name, head, refs, ref)
			}}
			in = dn
		}
		cmd, err := s.gitCommand(c, name, append(args, "upload-pack", "--stateless-rpc")...)
		if err != nil {
			writeError(c, err)
			return
		}
		cmd.Stdin = in
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		noCache(c)
		c.Header("Content-Type", "application/x-git-upload-pack-result")
		c.Status(http.StatusOK)
		cmd.Stdout = c.Writer
		if err := cmd.Run(); err != nil {
			select {
			case e := <-refused:
				// Refused before the first flush: git has answered nothing.
				if c.Writer.Size() <= 0 {
					var b bytes.Buffer
					writePkt(&b, "ERR "+e.Error()+"\n")
					c.Writer.Write(b.Bytes())
				}
				return
			default:
			}
			s.Logger.WarnContext(c.Request.Context(), "git upload-pack", "repo", name, "error", err, "stderr", stderr.String())
			// git upload-pack refused the request before answering (over
			// HTTP its reason went to stderr only, and git printed
			// "expected 'packfile'"): an ERR line is printed by git as
			// "fatal: remote error: <reason>". Only upload-pack's own
			// reasons about the request are passed on.
			msg := uploadPackRefusal(stderr.String())
			if dn != nil {
				if bad := dn.firstUnresolved(); bad != "" {
					msg = fmt.Sprintf("deepen-not %s: no single branch or tag of %s has that name (--shallow-exclude takes a ref of the repository)", bad, name)
				}
			}
			if c.Writer.Size() <= 0 && msg != "" { // git answered nothing
				var buf bytes.Buffer
				writePkt(&buf, "ERR "+msg+"\n")
				c.Writer.Write(buf.Bytes())
			}
		}
	}
}

// scopedRefusal is a line of a scoped key's upload-pack request that is
// refused (answered as git's "ERR" line).
type scopedRefusal struct{ msg string }

func (e *scopedRefusal) Error() string { return e.msg }

// scopedUploadRequest copies a scoped key's protocol v0 upload-pack
// request from r to w. git upload-pack refuses a want its namespace's
// refs do not reach, but not the rest: a "shallow <oid>" line of any
// commit, with "deepen 2147483647" (git fetch --unshallow), has git add
// that commit's parents to the wants unchecked; "have <oid>" is ACKed
// whenever the network stores the object; "deepen-not <ref>" resolves
// refs outside the namespace; and a want of a tree or blob is served
// whatever repository stores it (git checks the reachability of commits
// only). So a want naming an object not present to the key
// (repositories.ScopedPresence) is refused as git refuses one it does
// not store, a shallow or have line naming one is dropped, as git drops
// one it does not store, and deepen-not is refused (git resolves it outside the namespace, so it never worked
// on a workspace's own branch names anyway).
func scopedUploadRequest(r *bufio.Reader, w io.Writer, present func(oid string) bool) error {
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
		if err != nil {
			return lockstep.Errorf(lockstep.EINVALID, "malformed pkt-line")
		}
		if n < 4 {
			if _, err := w.Write(hdr[:]); err != nil {
				return err
			}
			continue
		}
		b := make([]byte, n)
		copy(b, hdr[:])
		if _, err := io.ReadFull(r, b[4:]); err != nil {
			return err
		}
		word, arg, _ := strings.Cut(strings.TrimSuffix(string(b[4:]), "\n"), " ")
		switch word {
		case "have", "shallow":
			// git reads the first 40 hex digits, in either case.
			if len(arg) >= 40 {
				if oid := strings.ToLower(arg[:40]); lockstep.IsOID(oid) && !present(oid) {
					continue
				}
			}
		case "want":
			// git refuses a commit its refs do not reach, but serves any
			// other object by id (its check walks commits only): a blob
			// of another workspace, or the answer tells it is stored.
			// Refused as git refuses a want it does not store.
			if len(arg) >= 40 {
				if oid := strings.ToLower(arg[:40]); lockstep.IsOID(oid) && !present(oid) {
					return &scopedRefusal{"upload-pack: not our ref " + oid}
				}
			}
		case "deepen-not":
			return &scopedRefusal{"deepen-not (--shallow-exclude) is not served to a scoped key"}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
}

// gitLsRefs answers protocol v2's ls-refs command as git 2.39 does
// (gitprotocol-v2: "ls-refs"), from the store: HEAD first (when its
// branch exists, or "unborn HEAD" if asked), then every ref in name order,
// filtered by the ref-prefix arguments, with symref-target and peeled
// attributes when asked. Each namespace's HEAD is listed once (git's own
// ls-refs under GIT_NAMESPACE lists it twice).
func (s *Server) gitLsRefs(c *gin.Context, name string, br *bufio.Reader) {
	var symrefs, peel, unborn bool
	var prefixes []string
	args := false
	for {
		line, flush, err := readPkt(br)
		if err != nil {
			writeError(c, err)
			return
		}
		if flush == "0000" {
			break
		}
		if flush == "0001" {
			args = true
			continue
		}
		if !args {
			continue // command, agent, object-format, server-option
		}
		switch {
		case line == "symrefs":
			symrefs = true
		case line == "peel":
			peel = true
		case line == "unborn":
			unborn = true
		case strings.HasPrefix(line, "ref-prefix "):
			prefixes = append(prefixes, strings.TrimPrefix(line, "ref-prefix "))
		default:
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "ls-refs: unexpected argument %q", line))
			return
		}
	}
	if len(prefixes) > 10 {
		prefixes = nil // git: too many prefixes, list everything
	}
	match := func(ref string) bool {
		if len(prefixes) == 0 {
			return true
		}
		for _, p := range prefixes {
			if strings.HasPrefix(ref, p) {
				return true
			}
		}
		return false
	}
	head, refs, err := s.Repos.GitRefs(c.Request.Context(), name)
	if err != nil {
		writeError(c, err)
		return
	}
	var buf bytes.Buffer
	if match("HEAD") {
		line := ""
		for _, r := range refs {
			if r.Name == head {
				line = r.OID + " HEAD"
			}
		}
		if line == "" && unborn {
			if def, err := s.Repos.Repo(c.Request.Context(), name); err == nil && def.DefaultBranch != "" {
				line = "unborn HEAD"
				head = "refs/heads/" + def.DefaultBranch
			}
		}
		if line != "" {
			if symrefs && head != "" {
				line += " symref-target:" + head
			}
			writePkt(&buf, line+"\n")
		}
	}
	for _, r := range refs {
		if !match(r.Name) {
			continue
		}
		line := r.OID + " " + r.Name
		if peel && r.Peeled != "" {
			line += " peeled:" + r.Peeled
		}
		writePkt(&buf, line+"\n")
	}
	buf.WriteString("0000")
	noCache(c)
	c.Data(http.StatusOK, "application/x-git-upload-pack-result", buf.Bytes())
}

// readPkt reads one pkt-line: its payload without the trailing newline,
// or, for the special packets, flush "0000", "0001" or "0002".
func readPkt(r *bufio.Reader) (line, special string, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", "", lockstep.Errorf(lockstep.EINVALID, "truncated request")
	}
	n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
	if err != nil {
		return "", "", lockstep.Errorf(lockstep.EINVALID, "malformed pkt-line")
	}
	if n < 4 {
		return "", string(hdr[:]), nil
	}
	b := make([]byte, n-4)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", "", lockstep.Errorf(lockstep.EINVALID, "truncated request")
	}
	return strings.TrimSuffix(string(b), "\n"), "", nil
}

func (s *Server) gitReceivePackAdvertise(c *gin.Context, name string) {
	if err := s.Repos.CanPush(c.Request.Context(), caller(c), name); err != nil {
		gitAdvertiseError(c, err)
		return
	}
	refs, err := s.Repos.Refs(c.Request.Context(), name)
	if err != nil {
		gitAdvertiseError(c, err)
		return
	}
	caps := "report-status report-status-v2 delete-refs atomic ofs-delta quiet agent=lockstep"
	var buf bytes.Buffer
	writePkt(&buf, "# service=git-receive-pack\n")
	buf.WriteString("0000")
	if len(refs) == 0 {
		writePkt(&buf, lockstep.ZeroOID+" capabilities^{}\x00"+caps+"\n")
	}
	for i, r := range refs {
		line := r.OID + " " + r.Name
		if i == 0 {
			line += "\x00" + caps
		}
		writePkt(&buf, line+"\n")
	}
	buf.WriteString("0000")
	noCache(c)
	c.Data(http.StatusOK, "application/x-git-receive-pack-advertisement", buf.Bytes())
}

func (s *Server) handleGitReceivePack() gin.HandlerFunc {
	return func(c *gin.Context) {
		name, ok := s.gitRepo(c)
		if !ok {
			return
		}
		body, err := requestBody(c)
		if err != nil {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "bad gzip body: %v", err))
			return
		}
		lb := &limitedBody{r: body, left: s.Config.MaxUploadBytes}
		if lb.left <= 0 {
			lb.left = 512 << 20
		}
		br := bufio.NewReaderSize(lb, 64<<10)
		cmds, caps, err := readCommands(br)
		if err != nil {
			if lockstep.ErrorCode(err) == "" || lockstep.ErrorCode(err) == lockstep.EINTERNAL {
				writeError(c, err)
				return
			}
			// git prints an ERR line as "fatal: remote error: <reason>"
			// (an HTTP error status would read "RPC failed; HTTP 413").
			io.Copy(io.Discard, br)
			var out bytes.Buffer
			writePkt(&out, "ERR "+oneLine(lockstep.ErrorMessage(err))+"\n")
			noCache(c)
			c.Data(http.StatusOK, "application/x-git-receive-pack-result", out.Bytes())
			return
		}
		atomic := caps["atomic"]
		var pack io.Reader
		for _, cm := range cmds {
			if cm.New != lockstep.ZeroOID {
				pack = br // a pack follows unless every command is a delete
				break
			}
		}
		unpackErr, results, err := s.Repos.GitPush(c.Request.Context(), caller(c), name, cmds, atomic, pack)
		if err != nil {
			writeError(c, err)
			return
		}
		if pack != nil {
			// What was not read (a pack never ingested because every
			// command was refused first) is drained, bounded by the upload
			// limit, so that the client reads the report, not a reset.
			io.Copy(io.Discard, br)
		}
		if lockstep.Exhausted(unpackErr) {
			// Out of descriptors or memory: nothing moved; a 503 (git
			// prints "RPC failed; HTTP 503") says to retry, an "unpack"
			// line would read as a bad pack.
			writeError(c, unpackErr)
			return
		}
		var out bytes.Buffer
		if unpackErr != nil {
			msg := lockstep.ErrorMessage(unpackErr)
			if lb.tripped {
				msg = fmt.Sprintf("push over --max-upload-bytes (%d bytes)", s.Config.MaxUploadBytes)
			}
			writePkt(&out, "unpack "+oneLine(msg)+"\n")
		} else {
			writePkt(&out, "unpack ok\n")
		}
		for _, r := range results {
			if r.Err == nil {
				writePkt(&out, "ok "+r.Ref+"\n")
			} else {
				writePkt(&out, "ng "+r.Ref+" "+oneLine(refError(r.Err))+"\n")
			}
		}
		out.WriteString("0000")
		noCache(c)
		c.Data(http.StatusOK, "application/x-git-receive-pack-result", out.Bytes())
	}
}

// gitAdvertiseError answers a refused ref advertisement. The HTTP status
// stays (git asks for credentials on 401 and stops on 403 or 404); git
// clients get the reason as text/plain, which git prints line by line as
// "remote: <reason>" before its "fatal: unable to access" line. Other
// clients get the JSON envelope.
func gitAdvertiseError(c *gin.Context, err error) {
	if !strings.HasPrefix(c.GetHeader("User-Agent"), "git/") {
		writeError(c, err)
		return
	}
	err = exhaustedError(c, err)
	code := lockstep.ErrorCode(err)
	msg := lockstep.ErrorMessage(err)
	if code == lockstep.EINTERNAL {
		msg = "internal error"
	}
	c.Set("error", err.Error())
	if code == lockstep.EUNAVAILABLE {
		c.Header("Retry-After", retryAfterSeconds)
	}
	c.Header("Content-Type", "text/plain; charset=utf-8")
	c.AbortWithStatus(StatusOf(code))
	c.Writer.WriteString(oneLine(msg) + "\n")
}

func refError(err error) string {
	if m, ok := lockstep.AsRefMismatch(err); ok {
		if m.Conflicting != "" {
			// git's own words for a file/directory clash.
			return fmt.Sprintf("'%s' exists; cannot create '%s'", m.Conflicting, m.Ref)
		}
		return fmt.Sprintf("stale info: ref moved (expected %s, actual %s); fetch first", m.Expected, m.Actual)
	}
	return lockstep.ErrorMessage(err)
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func writePkt(w *bytes.Buffer, line string) {
	fmt.Fprintf(w, "%04x%s", len(line)+4, line)
}

// MaxPushRefs bounds the ref updates of one `git push`.
const MaxPushRefs = 1000

// readCommands parses the ref-update commands of a receive-pack request up
// to the flush packet: "old new ref\0capabilities" on the first line.
func readCommands(r *bufio.Reader) ([]repositories.RefCommand, map[string]bool, error) {
	caps := map[string]bool{}
	var cmds []repositories.RefCommand
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, nil, lockstep.Errorf(lockstep.EINVALID, "truncated push request")
		}
		n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
		if err != nil {
			return nil, nil, lockstep.Errorf(lockstep.EINVALID, "malformed pkt-line")
		}
		if n == 0 {
			break
		}
		if n < 4 {
			return nil, nil, lockstep.Errorf(lockstep.EINVALID, "malformed pkt-line")
		}
		line := make([]byte, n-4)
		if _, err := io.ReadFull(r, line); err != nil {
			return nil, nil, lockstep.Errorf(lockstep.EINVALID, "truncated push request")
		}
		s := strings.TrimSuffix(string(line), "\n")
		if i := strings.IndexByte(s, 0); i >= 0 {
			for _, cp := range strings.Fields(s[i+1:]) {
				caps[cp] = true
			}
			s = s[:i]
		}
		if strings.HasPrefix(s, "shallow ") || strings.HasPrefix(s, "push-cert") {
			return nil, nil, lockstep.Errorf(lockstep.EINVALID, "pushing from a shallow clone or signed pushes are not supported")
		}
		f := strings.Fields(s)
		if len(f) != 3 {
			return nil, nil, lockstep.Errorf(lockstep.EINVALID, "malformed push command %q", s)
		}
		cmds = append(cmds, repositories.RefCommand{Old: f[0], New: f[1], Ref: f[2]})
		if len(cmds) > MaxPushRefs {
			return nil, nil, lockstep.Errorf(lockstep.ETOOLARGE, "more than %d ref updates in one push: push them in several pushes", MaxPushRefs)
		}
	}
	return cmds, caps, nil
}
