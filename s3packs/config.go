package s3packs

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Setting is the environment variable that names the object store.
const Setting = "LOCKSTEP_OBJECT_STORE"

// DefaultTimeout bounds each start-up check (reaching the endpoint, the
// bucket check, the probe object) when the URL has no timeout key.
const DefaultTimeout = 5 * time.Second

// Config says where the packs live and how to reach them.
type Config struct {
	// Bucket is the bucket holding every network's packs.
	Bucket string
	// Prefix is the key prefix under the bucket ("" or "a/b", no
	// leading or trailing slash). A network's packs are under
	// <Prefix>/networks/<network>/.
	Prefix string
	// Endpoint is host[:port] of the S3 API (default s3.amazonaws.com).
	Endpoint string
	// Region is the bucket's region (default us-east-1).
	Region string
	// Insecure talks plain HTTP instead of HTTPS (local servers).
	Insecure bool
	// PathStyle forces path-style bucket addressing
	// (http://endpoint/bucket/key) even where virtual hosts would be used.
	PathStyle bool
	// Timeout bounds each start-up check, and the connection set-up and
	// the wait for the answer's headers of every request, which is tried
	// twice at most (default DefaultTimeout).
	Timeout time.Duration
	// AccessKey, SecretKey and SessionToken are the credentials
	// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).
	AccessKey, SecretKey, SessionToken string
}

// ParseConfig reads the object store's configuration: raw is the value of
// LOCKSTEP_OBJECT_STORE,
//
//	s3://BUCKET[/PREFIX][?endpoint=HOST:PORT&region=R&insecure=1&path_style=1&timeout=5s]
//
// and the credentials come from getenv (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, optional AWS_SESSION_TOKEN). Query keys:
//
//	endpoint    host[:port] of the S3 API (default s3.amazonaws.com)
//	region      the bucket's region (default us-east-1)
//	insecure    1 or true: plain HTTP (local servers such as versitygw or MinIO)
//	path_style  1 or true: path-style requests (most non-AWS servers need none:
//	            the client picks path style for endpoints that are not AWS's)
//	timeout     a Go duration bounding each start-up check, and each request's
//	            connection and wait for an answer (default 5s)
//
// Any other key, a malformed URL or missing credentials is an error whose
// one-line message names the setting.
func ParseConfig(raw string, getenv func(string) string) (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%s=%q: %s", Setting, raw, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("not a URL: %v", err)
	}
	if u.Scheme != "s3" {
		return bad("want s3://bucket/prefix?endpoint=host:port, not scheme %q", u.Scheme)
	}
	if u.User != nil {
		return bad("credentials do not belong in the URL: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	if u.Opaque != "" {
		return bad("want s3://bucket/prefix")
	}
	c := Config{
		Bucket:   u.Host,
		Prefix:   strings.Trim(u.Path, "/"),
		Endpoint: "s3.amazonaws.com",
		Region:   "us-east-1",
		Timeout:  DefaultTimeout,
	}
	if err := checkBucketName(c.Bucket); err != nil {
		return bad("%v", err)
	}
	if strings.Contains(c.Prefix, "//") || strings.Contains("/"+c.Prefix+"/", "/../") || strings.Contains("/"+c.Prefix+"/", "/./") {
		return bad("prefix %q has an empty, . or .. segment", c.Prefix)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return bad("query key %q given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "endpoint":
			if strings.Contains(v, "://") || strings.Contains(v, "/") {
				return bad("endpoint=%q: want host[:port] without scheme or path (insecure=1 for plain HTTP)", v)
			}
			if _, port, err := net.SplitHostPort(v); err == nil {
				if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
					return bad("endpoint=%q: bad port", v)
				}
			} else if v == "" || strings.Contains(v, ":") {
				return bad("endpoint=%q: want host[:port]", v)
			}
			c.Endpoint = v
		case "region":
			if v == "" {
				return bad("region is empty")
			}
			c.Region = v
		case "insecure", "path_style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("%s=%q: want 1 or 0", k, v)
			}
			if k == "insecure" {
				c.Insecure = b
			} else {
				c.PathStyle = b
			}
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return bad("timeout=%q: want a positive duration such as 5s", v)
			}
			c.Timeout = d
		default:
			return bad("unknown query key %q (known: endpoint, region, insecure, path_style, timeout)", k)
		}
	}
	c.AccessKey = getenv("AWS_ACCESS_KEY_ID")
	c.SecretKey = getenv("AWS_SECRET_ACCESS_KEY")
	c.SessionToken = getenv("AWS_SESSION_TOKEN")
	if c.AccessKey == "" || c.SecretKey == "" {
		return Config{}, fmt.Errorf("%s is set but AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not: set both to the object store's keys", Setting)
	}
	return c, nil
}

// checkBucketName applies S3's bucket naming rules (3-63 characters,
// lowercase letters, digits, '.' and '-', starting and ending with a
// letter or digit).
func checkBucketName(b string) error {
	if b == "" {
		return fmt.Errorf("no bucket: want s3://bucket/prefix")
	}
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q: a bucket name has 3 to 63 characters", b)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (c == '.' || c == '-') && i > 0 && i < len(b)-1
		if !ok {
			return fmt.Errorf("bucket %q: only lowercase letters, digits, '.' and '-' (not first or last)", b)
		}
	}
	return nil
}

// String returns the configuration without secrets, for logs and errors.
func (c Config) String() string {
	s := "s3://" + c.Bucket
	if c.Prefix != "" {
		s += "/" + c.Prefix
	}
	return s + " at " + c.Endpoint
}
