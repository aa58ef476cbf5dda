package wasihttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"wit_component/reconciler"
)

// fakeHost records the requests it is sent and answers every one with its fields.
type fakeHost struct {
	sent   []outgoing
	answer incoming
	fail   error
}

func useFake(t *testing.T) *fakeHost {
	t.Helper()
	fake := &fakeHost{answer: incoming{status: 200}}
	hostCalls = fake
	t.Cleanup(func() { hostCalls = nil })
	return fake
}

func (f *fakeHost) send(request outgoing) (incoming, error) {
	f.sent = append(f.sent, request)
	return f.answer, f.fail
}

func TestAPostThroughTheStandardClientIsSentWholeWithItsLength(t *testing.T) {
	fake := useFake(t)
	fake.answer = incoming{status: 201, header: [][2]string{{"x-request-id", "r-1"}, {"set-cookie", "a=1"}, {"set-cookie", "b=2"}}, body: []byte(`{"reply":"hi"}`)}
	resp, err := Client.Post("https://dns.test:8443/zones/a?dry=1", "application/json", strings.NewReader(`{"ttl":60}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || resp.Status != "201 Created" || string(body) != `{"reply":"hi"}` || resp.ContentLength != 14 {
		t.Fatalf("response %d %q %q %d", resp.StatusCode, resp.Status, body, resp.ContentLength)
	}
	if resp.Header.Get("X-Request-Id") != "r-1" || !reflect.DeepEqual(resp.Header["Set-Cookie"], []string{"a=1", "b=2"}) {
		t.Fatalf("headers %v", resp.Header)
	}
	want := outgoing{method: "POST", scheme: "https", authority: "dns.test:8443", pathWithQuery: "/zones/a?dry=1",
		header: [][2]string{{"Content-Type", "application/json"}, {"Content-Length", "10"}}, body: []byte(`{"ttl":60}`)}
	if len(fake.sent) != 1 || !reflect.DeepEqual(fake.sent[0], want) {
		t.Fatalf("sent %+v, want %+v", fake.sent, want)
	}
}

func TestAGetHasNoLengthAndADeadlineBecomesTheTimeouts(t *testing.T) {
	fake := useFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/items", nil)
	if _, err := Do(req); err != nil {
		t.Fatal(err)
	}
	sent := fake.sent[0]
	if sent.method != "GET" || sent.header != nil || sent.body != nil || sent.timeout <= 50*time.Second || sent.timeout > time.Minute {
		t.Fatalf("sent %+v", sent)
	}

	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	req, _ = http.NewRequestWithContext(expired, "GET", "http://api.test/items", nil)
	if _, err := Do(req); !errors.Is(err, context.DeadlineExceeded) || len(fake.sent) != 1 {
		t.Fatalf("an expired request: %v, %d sent", err, len(fake.sent))
	}
}

func TestOnlyHTTPAndHTTPSAreSent(t *testing.T) {
	fake := useFake(t)
	req, _ := http.NewRequest("GET", "ftp://files.test/a", nil)
	_, err := Do(req)
	if e, ok := reconciler.AsHostError(err); !ok || e.Kind != reconciler.Invalid || len(fake.sent) != 0 {
		t.Fatalf("%v", err)
	}
}

func TestTheHostsRefusalIsADeniedHostErrorThatFailsTheReconcilePermanently(t *testing.T) {
	fake := useFake(t)
	fake.fail = fromErrorCode(internalError, "denied: guest `g` may not DELETE https://dns.test/a: allowed: GET https://dns.test/")
	req, _ := http.NewRequest("DELETE", "https://dns.test/a", nil)
	_, err := Client.Do(req) // wrapped in a *url.Error
	e, ok := reconciler.AsHostError(err)
	if !ok || e.Kind != reconciler.Denied || e.Message != "guest `g` may not DELETE https://dns.test/a: allowed: GET https://dns.test/" {
		t.Fatalf("%#v", err)
	}
	if !errors.Is(err, reconciler.ErrDenied) {
		t.Fatalf("errors.Is(%v, ErrDenied) is false", err)
	}
}

func TestErrorCodesHaveTheKindThatSaysWhetherToRetry(t *testing.T) {
	for _, c := range []struct {
		code uint8
		text string
		kind reconciler.ErrorKind
		says string
	}{
		{6, "", reconciler.Unavailable, "connection-refused"},
		{1, "NXDOMAIN", reconciler.Unavailable, "DNS-error (NXDOMAIN)"},
		{33, "", reconciler.Unavailable, "HTTP-response-timeout"},
		{4, "", reconciler.Denied, "destination-IP-prohibited"},
		{15, "", reconciler.Denied, "HTTP-request-denied"},
		{17, "", reconciler.Invalid, "HTTP-request-body-size"},
		{28, "", reconciler.Other, "HTTP-response-body-size"},
		{25, "", reconciler.Unavailable, "HTTP-response-incomplete"},
		{14, "", reconciler.Unavailable, "TLS-alert-received"},
		{37, "", reconciler.Other, "configuration-error"},
		{38, "unavailable: the reconcile's deadline passed", reconciler.Unavailable, "the reconcile's deadline passed"},
		{38, "TLS with dns.test: bad certificate", reconciler.Other, "TLS with dns.test: bad certificate"},
		{38, "", reconciler.Other, "internal-error"},
		{99, "", reconciler.Other, "error-code 99"},
	} {
		e, ok := reconciler.AsHostError(fromErrorCode(c.code, c.text))
		if !ok || e.Kind != c.kind || e.Message != c.says {
			t.Errorf("error-code %d %q: %#v, want %s %q", c.code, c.text, e, c.kind, c.says)
		}
	}
	if e, _ := reconciler.AsHostError(fromHeaderError(1)); e.Kind != reconciler.Invalid || !strings.Contains(e.Message, "(forbidden)") {
		t.Errorf("header-error: %#v", e)
	}
}

func TestOutsideAComponentNothingIsSent(t *testing.T) {
	req, _ := http.NewRequest("GET", "http://api.test/", nil)
	if _, err := Do(req); err == nil || !strings.Contains(err.Error(), "only inside the component") {
		t.Fatalf("%v", err)
	}
}
