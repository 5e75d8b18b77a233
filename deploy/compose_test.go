package deploy

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type composeFile struct {
	Services map[string]struct {
		Image       string            `json:"image"`
		Build       any               `json:"build"`
		Environment map[string]string `json:"environment"`
		Volumes     []string          `json:"volumes"`
		Ports       []string          `json:"ports"`
		Command     []string          `json:"command"`
		Entrypoint  []string          `json:"entrypoint"`
		DependsOn   map[string]struct {
			Condition string `json:"condition"`
		} `json:"depends_on"`
	} `json:"services"`
	Volumes map[string]any `json:"volumes"`
}

// unescaped is a value as compose passes it on: "$$" is a literal "$".
func unescaped(s string) string { return strings.ReplaceAll(s, "$$", "$") }

// interpolated resolves compose's ${NAME:-default} to the default, as
// `docker compose` does with NAME unset.
func interpolated(s string) string {
	return regexp.MustCompile(`\$\{[A-Z0-9_]+:-([^}]*)\}`).ReplaceAllString(s, "$1")
}

func readCompose(t *testing.T, path string) composeFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

var replicas = []string{"lockstep-1", "lockstep-2", "lockstep-3"}

// TestComposeReplicas checks docker-compose.yml: three replicas of one
// image with the same metadata, Redis, object-store and secret settings,
// each with a data volume of its own, the first one started alone (it
// creates the admin key), nginx in front, and the services they need.
func TestComposeReplicas(t *testing.T) {
	c := readCompose(t, "../docker-compose.yml")
	for _, name := range append(slices.Clone(replicas), "lb", "postgres", "redis", "s3", "s3-init", "secrets") {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("docker-compose.yml has no service %q", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	first := c.Services[replicas[0]]
	shared := []string{"LOCKSTEP_DATABASE_URL", "LOCKSTEP_REDIS_URL", "LOCKSTEP_OBJECT_STORE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "LOCKSTEP_SECRET_KEY_FILE", "LOCKSTEP_ADDR", "LOCKSTEP_BRANCH_DATABASE_URL"}
	dataVolumes := map[string]string{}
	for _, name := range replicas {
		s := c.Services[name]
		if s.Image != "lockstep:local" || s.Image != first.Image {
			t.Errorf("%s: image %q, want lockstep:local like %s", name, s.Image, replicas[0])
		}
		for _, k := range shared {
			if s.Environment[k] == "" {
				t.Errorf("%s: %s is not set", name, k)
			} else if s.Environment[k] != first.Environment[k] {
				t.Errorf("%s: %s = %q, %s has %q", name, k, s.Environment[k], replicas[0], first.Environment[k])
			}
		}
		if got := s.Environment["LOCKSTEP_ADDR"]; got != "0.0.0.0:7070" {
			t.Errorf("%s: LOCKSTEP_ADDR %q, want 0.0.0.0:7070", name, got)
		}
		if !strings.Contains(unescaped(strings.Join(s.Entrypoint, " ")), "LOCKSTEP_BRANCH_SECRET=\"$(cat /secrets/branch.secret)\"") {
			t.Errorf("%s: the entrypoint does not read the shared branch secret: %q", name, s.Entrypoint)
		}
		var data, secrets string
		for _, v := range s.Volumes {
			v, _, _ = strings.Cut(v, " ")
			switch {
			case strings.HasSuffix(v, ":/data"):
				data = strings.TrimSuffix(v, ":/data")
			case v == "lockstep-secrets:/secrets:ro":
				secrets = v
			}
		}
		if data == "" {
			t.Errorf("%s: no volume at /data (its cache)", name)
		} else if other, dup := dataVolumes[data]; dup {
			t.Errorf("%s and %s share the data volume %s: each replica needs its own cache", name, other, data)
		} else if _, ok := c.Volumes[data]; !ok {
			t.Errorf("%s: data volume %s is not declared", name, data)
		}
		dataVolumes[data] = name
		if secrets == "" {
			t.Errorf("%s: the shared secrets volume is not mounted read-only at /secrets", name)
		}
		if name != replicas[0] {
			if d, ok := s.DependsOn[replicas[0]]; !ok || d.Condition != "service_healthy" {
				t.Errorf("%s must wait for %s to be healthy (only one replica may create the first admin key)", name, replicas[0])
			}
		}
	}
	for _, dep := range []string{"postgres", "redis", "s3-init", "secrets"} {
		if _, ok := first.DependsOn[dep]; !ok {
			t.Errorf("%s does not wait for %s", replicas[0], dep)
		}
	}

	// The object store the replicas name is the bucket s3-init creates on
	// the s3 service, with the keys the s3 service accepts.
	store, err := url.Parse(first.Environment["LOCKSTEP_OBJECT_STORE"])
	if err != nil || store.Scheme != "s3" {
		t.Fatalf("LOCKSTEP_OBJECT_STORE %q: want s3://bucket/prefix?endpoint=…", first.Environment["LOCKSTEP_OBJECT_STORE"])
	}
	if ep := store.Query().Get("endpoint"); ep != "s3:7070" || store.Query().Get("insecure") != "true" {
		t.Errorf("LOCKSTEP_OBJECT_STORE endpoint %q insecure %q, want s3:7070 and true", ep, store.Query().Get("insecure"))
	}
	s3 := c.Services["s3"]
	if !strings.HasPrefix(s3.Image, "versity/versitygw:") {
		t.Errorf("s3 image %q, want versity/versitygw", s3.Image)
	}
	cmd := interpolated(strings.Join(s3.Command, " "))
	for _, want := range []string{"--access " + interpolated(first.Environment["AWS_ACCESS_KEY_ID"]), "--secret " + interpolated(first.Environment["AWS_SECRET_ACCESS_KEY"]), "--port :7070", "posix /data"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("s3 command %q lacks %q", cmd, want)
		}
	}
	init := c.Services["s3-init"]
	if interpolated(init.Environment["AWS_ACCESS_KEY_ID"]) != interpolated(first.Environment["AWS_ACCESS_KEY_ID"]) ||
		interpolated(init.Environment["AWS_SECRET_ACCESS_KEY"]) != interpolated(first.Environment["AWS_SECRET_ACCESS_KEY"]) {
		t.Errorf("s3-init's keys differ from the replicas'")
	}
	if script := strings.Join(init.Command, "\n"); !strings.Contains(script, "--bucket "+store.Host) || !strings.Contains(script, "http://s3:7070") {
		t.Errorf("s3-init does not create bucket %q on http://s3:7070:\n%s", store.Host, script)
	}
	if script := strings.Join(c.Services["secrets"].Command, "\n"); !strings.Contains(script, "secret.key") || !strings.Contains(script, "branch.secret") || !strings.Contains(script, "chmod 600") {
		t.Errorf("the secrets service does not write secret.key and branch.secret with mode 600:\n%s", script)
	}
	if got := first.Environment["LOCKSTEP_SECRET_KEY_FILE"]; got != "/secrets/secret.key" {
		t.Errorf("LOCKSTEP_SECRET_KEY_FILE %q, want /secrets/secret.key", got)
	}

	lb := c.Services["lb"]
	if !strings.HasPrefix(lb.Image, "nginx:") || !slices.Contains(lb.Volumes, "./deploy/nginx.conf:/etc/nginx/nginx.conf:ro") || !slices.Contains(lb.Ports, "7070:7070") {
		t.Errorf("lb: image %q volumes %v ports %v; want nginx with deploy/nginx.conf on 7070", lb.Image, lb.Volumes, lb.Ports)
	}
	for _, name := range replicas {
		if len(c.Services[name].Ports) != 0 {
			t.Errorf("%s publishes ports %v: only the load balancer should", name, c.Services[name].Ports)
		}
	}
}

// TestNginxConf: the balancer names the three replicas, round-robin (no
// other balancing method), streams request bodies and takes any size.
func TestNginxConf(t *testing.T) {
	b, err := os.ReadFile("nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := regexp.MustCompile(`(?m)#.*$`).ReplaceAllString(string(b), "")
	up := regexp.MustCompile(`(?s)upstream\s+lockstep\s*\{(.*?)\}`).FindStringSubmatch(conf)
	if up == nil {
		t.Fatalf("nginx.conf has no upstream lockstep block:\n%s", conf)
	}
	for _, r := range replicas {
		if !regexp.MustCompile(`(?m)^\s*server\s+` + r + `:7070[\s;]`).MatchString(up[1]) {
			t.Errorf("upstream lockstep does not name %s:7070", r)
		}
	}
	for _, m := range []string{"least_conn", "ip_hash", "hash ", "random"} {
		if strings.Contains(up[1], m) {
			t.Errorf("upstream lockstep uses %q: want round-robin", m)
		}
	}
	for _, want := range []string{"proxy_pass http://lockstep;", "proxy_request_buffering off;", "client_max_body_size 0;", "listen 7070;"} {
		if !strings.Contains(conf, want) {
			t.Errorf("nginx.conf lacks %q", want)
		}
	}
	if strings.Count(conf, "{") != strings.Count(conf, "}") {
		t.Errorf("nginx.conf: unbalanced braces")
	}
}

// TestComposeSingle: the one-server variant still starts lockstep with
// Postgres and Redis on port 7070.
func TestComposeSingle(t *testing.T) {
	c := readCompose(t, "../docker-compose.single.yml")
	for _, name := range []string{"lockstep", "postgres", "redis"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("docker-compose.single.yml has no service %q", name)
		}
	}
	s := c.Services["lockstep"]
	if s.Environment["LOCKSTEP_DATABASE_URL"] == "" || s.Environment["LOCKSTEP_REDIS_URL"] == "" || !slices.Contains(s.Ports, "7070:7070") {
		t.Errorf("single lockstep: env %v ports %v", s.Environment, s.Ports)
	}
}
