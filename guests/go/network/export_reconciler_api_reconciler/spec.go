package export_reconciler_api_reconciler

// Validation of a Network's `spec`. The CRD carries the same rules as CEL, but an API server
// without them (or an object written before they existed) can still hand us anything, and the
// backend must never see a bad spec. Messages are word for word the Rust guest's.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// validSpec is a spec that passed every rule.
type validSpec struct {
	cidr    netip.Prefix
	gateway netip.Addr
}

// specError is the first rule a spec breaks: which field, and what it must be.
type specError struct {
	field, rule string
}

func (e *specError) Error() string { return e.field + " " + e.rule }

func broken(field, rule string, args ...any) *specError {
	return &specError{field, fmt.Sprintf(rule, args...)}
}

// validate checks `spec.cidr` and `spec.gateway`: cidr is an IPv4 or IPv6 prefix with no host
// bits set; gateway is an address of the same family, inside cidr, and neither its network
// address nor (IPv4, prefixes up to /30) its broadcast address. The first rule broken, cidr
// before gateway.
func validate(spec json.RawMessage) (validSpec, *specError) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(spec, &fields); err != nil {
		fields = nil // not an object: every field is missing
	}
	cidrText, err := stringField(fields, "cidr", "spec.cidr")
	if err != nil {
		return validSpec{}, err
	}
	gatewayText, err := stringField(fields, "gateway", "spec.gateway")
	if err != nil {
		return validSpec{}, err
	}

	cidr, parseErr := netip.ParsePrefix(cidrText)
	if parseErr != nil {
		return validSpec{}, broken("spec.cidr", "%s must be an IPv4 or IPv6 prefix such as 10.10.0.0/24", rustQuote(cidrText))
	}
	if cidr.Masked() != cidr {
		return validSpec{}, broken("spec.cidr", "%s must not have host bits set (did you mean %s?)", cidrText, cidr.Masked())
	}

	gateway, parseErr := netip.ParseAddr(gatewayText)
	if parseErr != nil || gateway.Zone() != "" {
		return validSpec{}, broken("spec.gateway", "%s must be an IPv4 or IPv6 address", rustQuote(gatewayText))
	}
	if gateway.Is4() != cidr.Addr().Is4() {
		return validSpec{}, broken("spec.gateway", "%s must be of the same address family as spec.cidr %s", gateway, cidr)
	}
	if !cidr.Contains(gateway) {
		return validSpec{}, broken("spec.gateway", "%s must lie inside spec.cidr %s", gateway, cidr)
	}
	if gateway == cidr.Addr() {
		return validSpec{}, broken("spec.gateway", "%s must not be the network address of spec.cidr %s", gateway, cidr)
	}
	// /31 and /32 have no broadcast address (RFC 3021); IPv6 has none at all.
	if gateway.Is4() && cidr.Bits() < 31 && gateway == broadcast(cidr) {
		return validSpec{}, broken("spec.gateway", "%s must not be the broadcast address of spec.cidr %s", gateway, cidr)
	}
	return validSpec{cidr, gateway}, nil
}

func broadcast(prefix netip.Prefix) netip.Addr {
	bytes := prefix.Addr().As4()
	for bit := prefix.Bits(); bit < 32; bit++ {
		bytes[bit/8] |= 0x80 >> (bit % 8)
	}
	return netip.AddrFrom4(bytes)
}

func stringField(fields map[string]json.RawMessage, key, field string) (string, *specError) {
	raw, present := fields[key]
	if !present || string(raw) == "null" {
		return "", broken(field, "is required")
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return "", broken(field, "must be a string, not %s", compact(raw))
	}
	if strings.TrimSpace(text) == "" {
		return "", broken(field, "must not be empty")
	}
	return text, nil
}

// compact prints a JSON value without whitespace and with object keys sorted, as serde_json
// prints a `Value`.
func compact(raw json.RawMessage) string {
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.UseNumber()
	var value any
	if decoder.Decode(&value) != nil {
		return string(raw)
	}
	var out bytes.Buffer
	encoder := json.NewEncoder(&out)
	encoder.SetEscapeHTML(false)
	if encoder.Encode(value) != nil {
		return string(raw)
	}
	return strings.TrimSuffix(out.String(), "\n")
}

// rustQuote quotes a string as Rust's `{:?}` does for the text a user is likely to write.
func rustQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == 0:
			b.WriteString(`\0`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u{%x}`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
