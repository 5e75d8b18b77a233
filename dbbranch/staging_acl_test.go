package dbbranch

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestTemplateStagingClosedToPublic: the staging copy of a user's
// database is open to connections while its objects are handed to the
// repository's owner role; a database is created with CONNECT for PUBLIC,
// so in that window any role of the server (every workspace's branch
// role: it can read the staging name in pg_database) could connect and
// keep its session, reading and writing the copy every later branch of
// the repository starts from (a same-repository role is a member of the
// owner role). PUBLIC must have lost CONNECT before connections are
// allowed. An event trigger in the source database (copied with it)
// records the staging database's ACL while takeOwnership runs there.
func TestTemplateStagingClosedToPublic(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{})
	cc, _ := pgx.ParseConfig(testURL())
	cc.Database = f.template
	src, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, src, `CREATE TABLE acl_seen (db text, acl text);
CREATE FUNCTION record_acl() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO acl_seen SELECT datname, coalesce(datacl::text, 'default: PUBLIC may connect') FROM pg_database WHERE datname = current_database();
END $$;
CREATE EVENT TRIGGER record_acl ON ddl_command_end EXECUTE FUNCTION record_acl();`)
	src.Close(ctx)

	mustOK(t, f.m.BindTemplate(ctx, "app", f.template))
	b := must[*Branch](t)(f.m.CreateBranch(ctx, "app", "ws-a"))
	cc.Database = b.Database
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT db, acl FROM acl_seen")
	if err != nil {
		t.Fatal(err)
	}
	seen, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ DB, ACL string }])
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) == 0 {
		t.Fatal("the event trigger recorded nothing while the staging copy was prepared")
	}
	for _, s := range seen {
		// An aclitem granted to PUBLIC has an empty grantee: "=Tc/admin".
		if strings.HasPrefix(s.ACL, "default") || strings.Contains(s.ACL, "{=") || strings.Contains(s.ACL, ",=") {
			t.Fatalf("staging copy %s was open to connections with ACL %s", s.DB, s.ACL)
		}
	}
}
