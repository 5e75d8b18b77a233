package dbbranch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// pgCluster is a throwaway PostgreSQL cluster owned by one test: its own
// data directory, its own port on 127.0.0.1, stopped (immediately) and
// removed when the test ends. Tests that kill backends or restart the
// server use it so they cannot disturb the machine's own server or the
// other tests.
type pgCluster struct {
	bin      string // directory of initdb and postgres
	dir      string // owned by the server's OS user
	data     string
	logFile  string
	port     int
	password string // of the superuser postgres, for host (TCP) connections
	asUser   string // OS user the server runs as ("" = the current user)
	cred     *syscall.Credential

	postmaster *exec.Cmd
	exited     chan struct{} // closed when postmaster has exited
}

const pgInstallHint = "install the PostgreSQL 15 server binaries (apt-get install -y postgresql)"

// pgBinDir finds initdb and postgres: pg_config --bindir first, then the
// newest /usr/lib/postgresql/*/bin.
func pgBinDir() (string, error) {
	var cands []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		cands = append(cands, strings.TrimSpace(string(out)))
	}
	glob, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(glob, func(a, b string) int { // newest major first
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	cands = append(cands, glob...)
	for _, d := range cands {
		if fileExists(filepath.Join(d, "initdb")) && fileExists(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("no initdb and postgres found (pg_config --bindir, /usr/lib/postgresql/*/bin)")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// mustCluster initdb's and starts a throwaway cluster (PostgreSQL 15 or
// later: CREATE DATABASE … STRATEGY). Host connections authenticate with
// SCRAM (so the workspace DSNs' passwords are really checked); fsync is off
// for speed, full_page_writes stays on.
//
// initdb and postgres refuse to run as root: as root, initdb runs as the
// "postgres" OS user (runuser) and the server with that user's
// credentials; as any other user, as that user. The server is a child of
// the test process, stopped (immediate shutdown) at cleanup, and by the
// kernel if the test binary dies. Under -short the test is skipped
// (starting a cluster takes seconds); a missing installation fails the
// test with what to install.
func mustCluster(tb testing.TB) *pgCluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: skipping a test that starts its own PostgreSQL cluster (initdb and a server, several seconds)")
	}
	bin, err := pgBinDir()
	if err != nil {
		tb.Fatalf("throwaway PostgreSQL cluster: %v; %s", err, pgInstallHint)
	}
	out, err := exec.Command(filepath.Join(bin, "initdb"), "--version").Output()
	if err != nil {
		tb.Fatalf("throwaway PostgreSQL cluster: %s/initdb --version: %v; %s", bin, err, pgInstallHint)
	}
	if f := strings.Fields(string(out)); len(f) < 3 || majorVersion(f[len(f)-1]) < 15 {
		tb.Fatalf("throwaway PostgreSQL cluster: %s is %q, need 15 or later (CREATE DATABASE … STRATEGY); %s", bin, strings.TrimSpace(string(out)), pgInstallHint)
	}
	c := &pgCluster{bin: bin, dir: tb.TempDir(), password: randHex(24)}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("throwaway PostgreSQL cluster: initdb refuses to run as root and there is no postgres OS user to run it as (%v); %s", err, pgInstallHint)
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			tb.Fatalf("throwaway PostgreSQL cluster: running as root needs runuser (util-linux) to start the server as %q: %v", "postgres", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		// t.TempDir's parent is 0700 root: let the server's user through.
		if err := os.Chmod(filepath.Dir(c.dir), 0o711); err != nil {
			tb.Fatal(err)
		}
		if err := os.Chown(c.dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
		c.asUser = "postgres"
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	c.data = filepath.Join(c.dir, "data")
	c.logFile = filepath.Join(c.dir, "server.log")
	pwfile := filepath.Join(c.dir, "pw")
	if err := os.WriteFile(pwfile, []byte(c.password+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	if c.asUser != "" {
		u, _ := user.Lookup(c.asUser)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		os.Chown(pwfile, uid, gid)
	}
	if out, err := c.cmd("initdb", "-D", c.data, "-U", "postgres", "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync", "--no-instructions",
		"-E", "UTF8", "--locale=C").CombinedOutput(); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	os.Remove(pwfile)

	tb.Cleanup(func() {
		if err := c.stop(); err != nil {
			tb.Errorf("stop throwaway cluster: %v", err)
		}
		if tb.Failed() {
			c.logTail(tb, 60)
		}
	})
	// The port is free when asked; another process may take it before
	// the server binds it: then try another.
	for attempt := 1; ; attempt++ {
		c.port = testenv.FreePort(tb)
		conf := fmt.Sprintf("\n# throwaway test cluster\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"+
			"fsync = off\nmax_connections = 100\nlog_min_messages = warning\nlog_min_error_statement = panic\nlog_line_prefix = '%%m [%%p] %%a '\n", c.port)
		f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			tb.Fatal(err)
		}
		f.WriteString(conf) // the last setting wins
		f.Close()
		err = c.start()
		if err == nil {
			break
		}
		if attempt == 3 {
			c.logTail(tb, 30)
			tb.Fatalf("start throwaway cluster: %v", err)
		}
	}
	return c
}

// start runs the postmaster as a child of the test process (not
// daemonized by pg_ctl): if the test binary dies (a -timeout panic, a
// kill), the kernel sends the postmaster SIGQUIT (immediate shutdown), so
// no server outlives the test. It waits until the server accepts
// connections.
func (c *pgCluster) start() error {
	logf, err := os.OpenFile(c.logFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.data)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT, Credential: c.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	c.postmaster, c.exited = cmd, exited
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := c.connect(ctx, "postgres")
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("postgres exited at start-up (%v): %v", cmd.ProcessState, err)
		default:
		}
		if time.Now().After(deadline) {
			c.stop()
			return fmt.Errorf("throwaway cluster on port %d does not accept connections: %w", c.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop shuts the server down immediately (SIGQUIT: no checkpoint; crash
// recovery at the next start) and waits for it; SIGKILL after 30 s.
func (c *pgCluster) stop() error {
	if c.postmaster == nil {
		return nil
	}
	defer func() { c.postmaster = nil }()
	c.postmaster.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.exited:
		return nil
	case <-time.After(30 * time.Second):
	}
	c.postmaster.Process.Kill()
	<-c.exited
	return fmt.Errorf("postgres (pid %d) ignored SIGQUIT for 30 s; killed", c.postmaster.Process.Pid)
}

// restart crashes the server (immediate shutdown) and starts it again on
// the same port. Safe to call from any goroutine.
func (c *pgCluster) restart() error {
	if err := c.stop(); err != nil {
		return err
	}
	return c.start()
}

func majorVersion(v string) int {
	n, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return n
}

// cmd runs one of the cluster's binaries (initdb) as the server's OS
// user, in the cluster's directory.
func (c *pgCluster) cmd(name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if c.asUser != "" {
		cmd = exec.Command("runuser", append([]string{"-u", c.asUser, "--", filepath.Join(c.bin, name)}, args...)...)
	} else {
		cmd = exec.Command(filepath.Join(c.bin, name), args...)
	}
	cmd.Dir = c.dir
	return cmd
}

// URL is the superuser URL of database db, with application_name app.
func (c *pgCluster) URL(db, app string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", c.password), Host: fmt.Sprintf("127.0.0.1:%d", c.port), Path: "/" + db}
	q := url.Values{"sslmode": {"disable"}, "connect_timeout": {"5"}}
	if app != "" {
		q.Set("application_name", app)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// connect opens a superuser connection to db.
func (c *pgCluster) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	return pgx.Connect(ctx, c.URL(db, "lockstep-test"))
}

func (c *pgCluster) mustConnect(tb testing.TB, db string) *pgx.Conn {
	tb.Helper()
	conn, err := c.connect(context.Background(), db)
	if err != nil {
		tb.Fatalf("connect to throwaway cluster, database %s: %v", db, err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func (c *pgCluster) logTail(tb testing.TB, n int) {
	b, err := os.ReadFile(c.logFile)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	tb.Logf("throwaway cluster log (last %d lines):\n%s", len(lines), strings.Join(lines, "\n"))
}

// mustClusterTemplate creates a small template on the cluster: four tables
// (a foreign key, an index), a few hundred rows, owned by the superuser.
func mustClusterTemplate(tb testing.TB, c *pgCluster, name string) {
	tb.Helper()
	ctx := context.Background()
	admin := c.mustConnect(tb, "postgres")
	mustExec(tb, admin, "CREATE DATABASE "+ident(name))
	conn, err := c.connect(ctx, name)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	mustExec(tb, conn, `
CREATE TABLE accounts (id serial PRIMARY KEY, name text NOT NULL, balance bigint NOT NULL DEFAULT 0);
CREATE TABLE events (id bigserial PRIMARY KEY, account int REFERENCES accounts(id), kind text NOT NULL, n int NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX events_account ON events(account);
CREATE TABLE kv (k text PRIMARY KEY, v int NOT NULL);
CREATE TABLE log (id bigserial PRIMARY KEY, worker int NOT NULL, body text NOT NULL);
INSERT INTO accounts (name, balance) SELECT 'acct' || g, g * 100 FROM generate_series(1, 50) g;
INSERT INTO events (account, kind, n) SELECT 1 + g % 50, 'seed', g FROM generate_series(1, 200) g;
INSERT INTO kv SELECT 'k' || g, g FROM generate_series(1, 20) g;`)
	admin.Close(ctx)
}

// content is a digest of every row of every table in schema public: two
// databases with the same rows have the same digest. Sequences are left
// out on purpose: nextval is not transactional, so the agents' rolled-back
// inserts move them while writes are paused.
type content struct {
	Sum  string
	Rows int64
}

func (c content) String() string { return fmt.Sprintf("%d rows, %s", c.Rows, c.Sum[:12]) }

func contentOf(ctx context.Context, conn *pgx.Conn) (content, error) {
	rows, err := conn.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 1`)
	if err != nil {
		return content{}, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return content{}, err
	}
	h := sha256.New()
	var total int64
	for _, tbl := range tables {
		var n int64
		var sum string
		if err := conn.QueryRow(ctx, "SELECT count(*), coalesce(md5(string_agg(t::text, E'\\n' ORDER BY t::text)), '') FROM "+tbl+" t").Scan(&n, &sum); err != nil {
			return content{}, fmt.Errorf("table %s: %w", tbl, err)
		}
		fmt.Fprintf(h, "%s %d %s\n", tbl, n, sum)
		total += n
	}
	return content{Sum: hex.EncodeToString(h.Sum(nil)), Rows: total}, nil
}

// dsnContent connects with dsn (the agent's DSN) and digests the database.
func dsnContent(ctx context.Context, dsn string) (content, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return content{}, fmt.Errorf("connect with the branch DSN: %w", err)
	}
	defer conn.Close(context.Background())
	return contentOf(ctx, conn)
}

// dbState is a database's row in pg_database.
type dbState struct {
	OID       uint32
	AllowConn bool
	ConnLimit int32
}

func (s dbState) valid() bool { return s.AllowConn && s.ConnLimit != -2 }

func stateOf(ctx context.Context, c *pgCluster, db string) (dbState, error) {
	conn, err := c.connect(ctx, "postgres")
	if err != nil {
		return dbState{}, err
	}
	defer conn.Close(context.Background())
	var s dbState
	err = conn.QueryRow(ctx, "SELECT oid, datallowconn, datconnlimit FROM pg_database WHERE datname = $1", db).Scan(&s.OID, &s.AllowConn, &s.ConnLimit)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("database %s does not exist", db)
	}
	return s, err
}

// prefixObjects lists the databases (with "!" appended when invalid) and
// roles whose names start with prefix_.
func prefixObjects(ctx context.Context, c *pgCluster, prefix string) (dbs, roles []string, err error) {
	conn, err := c.connect(ctx, "postgres")
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT datname || CASE WHEN datconnlimit = -2 THEN '!' ELSE '' END FROM pg_database WHERE starts_with(datname, $1) ORDER BY 1", prefix+"_")
	if err != nil {
		return nil, nil, err
	}
	if dbs, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, nil, err
	}
	rows, err = conn.Query(ctx, "SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1) ORDER BY 1", prefix+"_")
	if err != nil {
		return nil, nil, err
	}
	roles, err = pgx.CollectRows(rows, pgx.RowTo[string])
	return dbs, roles, err
}

// loadErrorExpected: what an agent sees while its branch is snapshotted,
// restored or its server restarted: terminated sessions, refused or failed
// connections, a branch name briefly missing. Anything else is a finding.
func loadErrorExpected(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true // EOF, connection reset or refused, timeouts
	}
	switch pe.Code {
	case "57P01", "57P02", "57P03", // terminated, crash shutdown, cannot connect now
		"55000", // database is not currently accepting connections
		"3D000", // database does not exist (between rename aside and CREATE)
		"40P01", "40001":
		return true
	}
	return strings.HasPrefix(pe.Code, "08")
}
