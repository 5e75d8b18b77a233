package delivery

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// AllowList names hook targets that may be internal: host names (matched
// exactly, case-insensitively, against the URL's host), IP addresses and
// CIDR prefixes (matched against the address actually dialed). Everything
// else must be a public unicast address.
type AllowList struct {
	hosts    map[string]bool
	prefixes []netip.Prefix
}

// ParseAllowList parses a comma-separated list ("127.0.0.1,ci.internal,
// 10.1.0.0/16"); blanks are ignored.
func ParseAllowList(s string) (AllowList, error) {
	a := AllowList{hosts: map[string]bool{}}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			a.prefixes = append(a.prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(strings.Trim(f, "[]")); err == nil {
			ip = carriedV4(ip)
			a.prefixes = append(a.prefixes, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		if strings.ContainsAny(f, "/:@ ") {
			return a, fmt.Errorf("hook allow list entry %q: want a host name, an IP address or a CIDR prefix", f)
		}
		a.hosts[strings.ToLower(strings.TrimSuffix(f, "."))] = true
	}
	return a, nil
}

// hostAllowed reports whether a URL's host is on the list by name.
func (a AllowList) hostAllowed(host string) bool {
	return a.hosts[strings.ToLower(strings.TrimSuffix(host, "."))]
}

// ipAllowed reports whether an address is on the list.
func (a AllowList) ipAllowed(ip netip.Addr) bool {
	ip = carriedV4(ip)
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// carriedV4 returns the IPv4 address an IPv6 address carries in its last
// 32 bits when it is IPv4-mapped (::ffff:a.b.c.d) or IPv4-compatible
// (::a.b.c.d, the deprecated ::/96 form), and ip itself otherwise, so that
// both forms are checked like the IPv4 address they carry: ::127.0.0.1 is
// loopback, ::169.254.169.254 link-local. (:: and ::1 become 0.0.0.0 and
// 0.0.0.1, inside the refused 0.0.0.0/8.)
func carriedV4(ip netip.Addr) netip.Addr {
	ip = ip.Unmap()
	if !ip.Is6() || ip.Zone() != "" {
		return ip
	}
	b := ip.As16()
	for _, x := range b[:12] {
		if x != 0 {
			return ip
		}
	}
	return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
}

// blockedPrefixes are the internal, special-purpose and non-unicast ranges
// a hook may not reach unless allowed (IPv4-mapped and IPv4-compatible IPv6
// addresses are reduced to the IPv4 address they carry first, so
// ::ffff:127.0.0.1 and ::127.0.0.1 are loopback).
var blockedPrefixes = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this network", 0.0.0.0
		"10.0.0.0/8",      // private
		"100.64.0.0/10",   // carrier-grade NAT
		"127.0.0.0/8",     // loopback
		"169.254.0.0/16",  // link-local, cloud metadata (169.254.169.254)
		"172.16.0.0/12",   // private
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation
		"192.168.0.0/16",  // private
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"224.0.0.0/4",     // multicast
		"240.0.0.0/4",     // reserved, broadcast
		"::/128",          // unspecified
		"::1/128",         // loopback
		"::ffff:0:0/96",   // IPv4-mapped (checked after unmapping; kept for safety)
		"64:ff9b::/96",    // NAT64: embeds an IPv4 address
		"64:ff9b:1::/48",  // local NAT64
		"100::/64",        // discard
		"2001::/32",       // Teredo: embeds an IPv4 address
		"2001:db8::/32",   // documentation
		"2002::/16",       // 6to4: embeds an IPv4 address
		"fc00::/7",        // unique local
		"fe80::/10",       // link-local
		"fec0::/10",       // deprecated site-local
		"ff00::/8",        // multicast
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// internalAddr reports why ip is not a public unicast address ("" when it
// is).
func internalAddr(ip netip.Addr) string {
	ip = carriedV4(ip)
	switch {
	case !ip.IsValid():
		return "an invalid address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address (cloud metadata lives there)"
	case ip.IsPrivate():
		return "a private address"
	case ip.IsUnspecified():
		return "the unspecified address"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "a multicast address"
	}
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return "an internal or reserved address (" + p.String() + ")"
		}
	}
	return ""
}

// CheckHookURL validates a hook URL at registration: an absolute http(s)
// URL without credentials whose host is allowed by name, or whose address
// (literal, or every address the name resolves to now) is public or on the
// allow list. A name that does not resolve yet is accepted: every delivery
// re-checks the address it dials.
func CheckHookURL(ctx context.Context, raw string, allow AllowList, resolver *net.Resolver) error {
	return checkTargetURL(ctx, raw, allow, resolver, "hook", "--hook-allow-hosts (LOCKSTEP_HOOK_ALLOW_HOSTS)")
}

// CheckTargetURL applies the hook-target rules to another kind of outward
// request (what names it in errors: "effect"; flag is the setting that
// allows internal hosts).
func CheckTargetURL(ctx context.Context, raw string, allow AllowList, resolver *net.Resolver, what, flag string) error {
	return checkTargetURL(ctx, raw, allow, resolver, what, flag)
}

// HostAllowed reports whether host is on the list by name.
func (a AllowList) HostAllowed(host string) bool { return a.hostAllowed(host) }

func checkTargetURL(ctx context.Context, raw string, allow AllowList, resolver *net.Resolver, what, flag string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return lockstep.Errorf(lockstep.EINVALID, "%s url %q: want an absolute http(s) URL", what, lockstep.RedactURL(raw))
	}
	if u.User != nil {
		why := "the hook secret signs every delivery"
		if what != "hook" {
			why = "send them in a header (Authorization is stored encrypted)"
		}
		return lockstep.Errorf(lockstep.EINVALID, "%s url %s: credentials in the URL (userinfo) are refused; %s", what, lockstep.RedactURL(raw), why)
	}
	if strings.HasPrefix(u.RawQuery, lockstep.SealPrefix) {
		// The store seals a query at rest into this form: a plaintext one
		// would be taken for ciphertext.
		return lockstep.Errorf(lockstep.EINVALID, "%s url %s: the query may not start with %q", what, lockstep.RedactURL(raw), lockstep.SealPrefix)
	}
	host := u.Hostname()
	if host == "" {
		return lockstep.Errorf(lockstep.EINVALID, "%s url %q: no host", what, lockstep.RedactURL(raw))
	}
	if allow.hostAllowed(host) {
		return nil
	}
	kind := what
	refuse := func(ip netip.Addr, why string) error {
		what := "host " + host + " is"
		if ip.String() != host {
			what = "host " + host + " resolves to " + ip.String() + ", which is"
		}
		return lockstep.Errorf(lockstep.EINVALID, "%s url %s: %s %s; %ss may only target public addresses unless the host is listed in %s",
			kind, lockstep.RedactURL(raw), what, why, kind, flag)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if why := internalAddr(ip); why != "" && !allow.ipAllowed(ip) {
			return refuse(ip, why)
		}
		return nil
	}
	if looksNumeric(host) {
		// 0x7f.1, 2130706433, 127.1: forms resolvers read as IPv4.
		return lockstep.Errorf(lockstep.EINVALID, "%s url %s: host %q is a numeric address in a non-standard form; write the address as a.b.c.d", what, lockstep.RedactURL(raw), host)
	}
	if h := strings.ToLower(strings.TrimSuffix(host, ".")); h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return lockstep.Errorf(lockstep.EINVALID, "%s url %s: host %s is loopback; %ss may only target public addresses unless the host is listed in %s", what, lockstep.RedactURL(raw), host, what, flag)
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	addrs, err := resolver.LookupNetIP(rctx, "ip", host)
	if err != nil {
		return nil // not resolvable now: the delivery checks what it dials
	}
	for _, ip := range addrs {
		if why := internalAddr(ip); why != "" && !allow.ipAllowed(ip) {
			return refuse(ip, why)
		}
	}
	return nil
}

// looksNumeric reports whether a host name is made of digits, dots and hex
// only in a way an inet_aton-style parser would take as an address.
func looksNumeric(h string) bool {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") {
		last = last[2:]
		for _, c := range last {
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
		return true
	}
	for _, c := range last {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// targetClients returns the delivery clients: guarded refuses to connect
// to an internal address (the check runs on the address actually dialed,
// after DNS resolution, so a name re-pointed at 169.254.169.254 after
// registration is still refused) unless it is on the allow list, naming
// setting in the refusal; open is for hosts allowed by name. Neither
// follows redirects nor uses a proxy from the environment (the dialed
// address would be the proxy's).
func targetClients(timeout time.Duration, allow AllowList, setting string) (guarded, open *http.Client) {
	mk := func(control func(ctx context.Context, network, address string, c syscall.RawConn) error) *http.Client {
		d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, ControlContext: control}
		tr := &http.Transport{
			Proxy:                 nil,
			DialContext:           d.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          32,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
		}
		return &http.Client{Timeout: timeout, Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	guarded = mk(func(_ context.Context, network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("hook target %s: %w", address, err)
		}
		if why := internalAddr(ap.Addr()); why != "" && !allow.ipAllowed(ap.Addr()) {
			return &blockedError{addr: ap.Addr(), why: why, setting: setting}
		}
		return nil
	})
	open = mk(nil)
	return guarded, open
}

// blockedError is a dial refused because the resolved address is internal.
type blockedError struct {
	addr    netip.Addr
	why     string
	setting string
}

func (e *blockedError) Error() string {
	return fmt.Sprintf("refused to connect to %s: %s (not on %s)", e.addr, e.why, e.setting)
}
