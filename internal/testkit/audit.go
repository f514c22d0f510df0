package testkit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// AuditEvent is one line of the API server's audit log
// (internal/localcluster Options.AuditLog).
type AuditEvent = auditv1.Event

// OperatorUserAgent starts the user agent of every request the operator
// binary sends (client-go names it after the binary; leader election adds
// "/leader-election").
const OperatorUserAgent = "simplewebapp-operator/"

// WriteVerbs are the audit verbs of requests that change state.
var WriteVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// ReadAudit reads an audit log: one JSON event per line. A last line that the
// API server is still writing (no newline yet) is left out.
func ReadAudit(path string) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseAudit(f)
}

// ParseAudit parses audit events, one JSON object per line.
func ParseAudit(r io.Reader) ([]AuditEvent, error) {
	var out []AuditEvent
	br := bufio.NewReaderSize(r, 1<<20)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			return out, nil // an unterminated last line is still being written
		}
		if err != nil {
			return out, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var e AuditEvent
		if err := json.Unmarshal(line, &e); err != nil {
			return out, fmt.Errorf("audit log line %d: %w", n, err)
		}
		out = append(out, e)
	}
}

// AuditFilter selects audit events; empty fields match everything.
type AuditFilter struct {
	User            string   // exact user name, e.g. system:serviceaccount:ns:name
	UserAgentPrefix string   // e.g. OperatorUserAgent
	Verbs           []string // e.g. WriteVerbs
	Resource        string   // e.g. "deployments"
	// Subresource: "" matches all; NoSubresource only the object itself.
	Subresource string
	Namespace   string
	Name        string
	// Succeeded keeps only requests the server answered with 2xx.
	Succeeded bool
	// From and To bound the time the server received the request
	// (inclusive, exclusive); zero: unbounded.
	From, To time.Time
}

// NoSubresource as AuditFilter.Subresource matches requests on the object
// itself (not /status, /scale, ...).
const NoSubresource = "-"

// Match reports whether e passes the filter.
func (f AuditFilter) Match(e *AuditEvent) bool {
	ref := e.ObjectRef
	if ref == nil {
		ref = &auditv1.ObjectReference{}
	}
	switch {
	case f.User != "" && e.User.Username != f.User,
		f.UserAgentPrefix != "" && !strings.HasPrefix(e.UserAgent, f.UserAgentPrefix),
		len(f.Verbs) > 0 && !slices.Contains(f.Verbs, e.Verb),
		f.Resource != "" && ref.Resource != f.Resource,
		f.Subresource == NoSubresource && ref.Subresource != "",
		f.Subresource != "" && f.Subresource != NoSubresource && ref.Subresource != f.Subresource,
		f.Namespace != "" && ref.Namespace != f.Namespace,
		f.Name != "" && ref.Name != f.Name,
		f.Succeeded && (e.ResponseStatus == nil || e.ResponseStatus.Code < 200 || e.ResponseStatus.Code > 299),
		!f.From.IsZero() && e.RequestReceivedTimestamp.Time.Before(f.From),
		!f.To.IsZero() && !e.RequestReceivedTimestamp.Time.Before(f.To):
		return false
	}
	return true
}

// Filter returns the events that f matches, in log order.
func (f AuditFilter) Filter(events []AuditEvent) []AuditEvent {
	var out []AuditEvent
	for i := range events {
		if f.Match(&events[i]) {
			out = append(out, events[i])
		}
	}
	return out
}

// Count is how many events f matches.
func (f AuditFilter) Count(events []AuditEvent) int {
	n := 0
	for i := range events {
		if f.Match(&events[i]) {
			n++
		}
	}
	return n
}

// AuditKey describes an event for CountBy: AuditByUser, AuditByVerb, ...
type AuditKey func(*AuditEvent) string

// The keys of CountBy.
var (
	AuditByUser      AuditKey = func(e *AuditEvent) string { return e.User.Username }
	AuditByUserAgent AuditKey = func(e *AuditEvent) string { return e.UserAgent }
	AuditByVerb      AuditKey = func(e *AuditEvent) string { return e.Verb }
	AuditByResource  AuditKey = func(e *AuditEvent) string { return AuditResource(e) }
	// AuditByObject is verb resource namespace/name.
	AuditByObject AuditKey = func(e *AuditEvent) string {
		ns, name := "", ""
		if e.ObjectRef != nil {
			ns, name = e.ObjectRef.Namespace, e.ObjectRef.Name
		}
		return fmt.Sprintf("%s %s %s/%s", e.Verb, AuditResource(e), ns, name)
	}
)

// AuditResource is the event's resource, with its subresource after a
// slash (deployments/status).
func AuditResource(e *AuditEvent) string {
	if e.ObjectRef == nil {
		return ""
	}
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}

// CountBy counts the events by key.
func CountBy(events []AuditEvent, key AuditKey) map[string]int {
	out := map[string]int{}
	for i := range events {
		out[key(&events[i])]++
	}
	return out
}

// Received is when the API server received the request.
func Received(e *AuditEvent) time.Time { return e.RequestReceivedTimestamp.Time }

// Rate is events per second over the events' own span (first to last
// received); 0 for fewer than two events.
func Rate(events []AuditEvent) float64 {
	if len(events) < 2 {
		return 0
	}
	first, last := Received(&events[0]), Received(&events[0])
	for i := range events {
		t := Received(&events[i])
		if t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	span := last.Sub(first).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(len(events)-1) / span
}

// FormatAudit is one line per event (time, user, user agent, verb, resource,
// object, code), for failure messages; at most max lines.
func FormatAudit(events []AuditEvent, max int) string {
	var b strings.Builder
	for i := range events {
		if i == max {
			fmt.Fprintf(&b, "... %d more\n", len(events)-max)
			break
		}
		e := &events[i]
		code := int32(0)
		if e.ResponseStatus != nil {
			code = e.ResponseStatus.Code
		}
		ns, name := "", ""
		if e.ObjectRef != nil {
			ns, name = e.ObjectRef.Namespace, e.ObjectRef.Name
		}
		fmt.Fprintf(&b, "%s %s %q %s %s %s/%s %d\n", Received(e).Format("15:04:05.000000"), e.User.Username, e.UserAgent,
			e.Verb, AuditResource(e), ns, name, code)
	}
	return b.String()
}
