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

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/forks"
)

// Git smart HTTP. Fetches and clones are served by the real `git
// upload-pack --stateless-rpc` on the network's repository with
// GIT_NAMESPACE set to the repository, so protocol v2, shallow and partial
// clones work as with any git server; it reads the on-disk ref mirror.
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
	n, err := s.Repos.Network(r.Network)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(c.Request.Context(), "git", args...)
	cmd.Dir = n.Dir()
	cmd.Env = append(os.Environ(), "GIT_NAMESPACE="+r.Name, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	if p := c.GetHeader("Git-Protocol"); p != "" && len(p) < 256 {
		cmd.Env = append(cmd.Env, "GIT_PROTOCOL="+p)
	}
	cmd.Args = append(cmd.Args, n.Dir())
	return cmd, nil
}

func (s *Server) gitUploadPackAdvertise(c *gin.Context, name string) {
	cmd, err := s.gitCommand(c, name, "-c", "uploadpack.allowFilter=true", "upload-pack", "--stateless-rpc", "--advertise-refs")
	if err != nil {
		gitAdvertiseError(c, err)
		return
	}
	out, err := cmd.Output()
	if err != nil {
		writeError(c, fmt.Errorf("git upload-pack --advertise-refs: %w", err))
		return
	}
	noCache(c)
	c.Header("Content-Type", "application/x-git-upload-pack-advertisement")
	var buf bytes.Buffer
	if !strings.Contains(c.GetHeader("Git-Protocol"), "version=2") {
		writePkt(&buf, "# service=git-upload-pack\n")
		buf.WriteString("0000")
	}
	buf.Write(out)
	c.Data(http.StatusOK, "application/x-git-upload-pack-advertisement", buf.Bytes())
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
		cmd, err := s.gitCommand(c, name, "-c", "uploadpack.allowFilter=true", "upload-pack", "--stateless-rpc")
		if err != nil {
			writeError(c, err)
			return
		}
		br := bufio.NewReader(body)
		cmd.Stdin = br
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		noCache(c)
		c.Header("Content-Type", "application/x-git-upload-pack-result")
		c.Status(http.StatusOK)
		cmd.Stdout = c.Writer
		// git 2.39's ls-refs (protocol v2) under GIT_NAMESPACE lists the
		// namespace's HEAD twice: once by name, once while walking the
		// namespace's refs. Keep the first.
		if head, _ := br.Peek(len("0014command=ls-refs\n")); string(head) == "0014command=ls-refs\n" {
			cmd.Stdout = &onceHEAD{w: c.Writer}
		}
		if err := cmd.Run(); err != nil {
			s.Logger.WarnContext(c.Request.Context(), "git upload-pack", "repo", name, "error", err, "stderr", stderr.String())
		}
	}
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
	code := lockstep.ErrorCode(err)
	msg := lockstep.ErrorMessage(err)
	if code == lockstep.EINTERNAL {
		msg = "internal error"
	}
	c.Set("error", err.Error())
	c.Header("Content-Type", "text/plain; charset=utf-8")
	c.AbortWithStatus(StatusOf(code))
	c.Writer.WriteString(oneLine(msg) + "\n")
}

func refError(err error) string {
	if lockstep.ErrorCode(err) == lockstep.EREFCONFLICT {
		d := lockstep.ErrorDetails(err)
		if other, ok := d["conflicting_ref"]; ok {
			// git's own words for a file/directory clash.
			return fmt.Sprintf("'%v' exists; cannot create '%v'", other, d["ref"])
		}
		return fmt.Sprintf("stale info: ref moved (expected %v, actual %v); fetch first", d["expected"], d["actual"])
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
func readCommands(r *bufio.Reader) ([]forks.RefCommand, map[string]bool, error) {
	caps := map[string]bool{}
	var cmds []forks.RefCommand
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
		cmds = append(cmds, forks.RefCommand{Old: f[0], New: f[1], Ref: f[2]})
		if len(cmds) > MaxPushRefs {
			return nil, nil, lockstep.Errorf(lockstep.ETOOLARGE, "more than %d ref updates in one push: push them in several pushes", MaxPushRefs)
		}
	}
	return cmds, caps, nil
}

// onceHEAD passes a protocol-v2 ls-refs answer through (pkt-lines up to a
// flush) and drops every "<oid> HEAD…" line after the first.
type onceHEAD struct {
	w      io.Writer
	buf    []byte
	seen   bool
	passed bool // the answer's flush went by: pass the rest as is
}

func (o *onceHEAD) Write(p []byte) (int, error) {
	if o.passed {
		return o.w.Write(p)
	}
	o.buf = append(o.buf, p...)
	for len(o.buf) >= 4 {
		n, err := strconv.ParseUint(string(o.buf[:4]), 16, 16)
		if err != nil { // not a pkt-line: give up filtering
			o.passed = true
			_, err := o.w.Write(o.buf)
			o.buf = nil
			return len(p), err
		}
		size := int(n)
		if size < 4 { // flush, delim, response-end
			size = 4
		}
		if len(o.buf) < size {
			break
		}
		line := o.buf[:size]
		drop := false
		if size > 4+41 {
			payload := string(line[4:])
			if rest, ok := strings.CutPrefix(payload[40:], " HEAD"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\n') {
				drop, o.seen = o.seen, true
			}
		}
		if !drop {
			if _, err := o.w.Write(line); err != nil {
				return len(p), err
			}
		}
		if n == 0 {
			o.passed = true
			rest := o.buf[size:]
			o.buf = nil
			if len(rest) > 0 {
				if _, err := o.w.Write(rest); err != nil {
					return len(p), err
				}
			}
			return len(p), nil
		}
		o.buf = o.buf[size:]
	}
	return len(p), nil
}
