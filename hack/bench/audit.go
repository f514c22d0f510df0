package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"example.com/simplewebapp-operator/internal/testkit"
)

// auditPolicy logs, at Metadata level, only the requests of the users the
// benchmark measures (the operator's and the bare client's ServiceAccounts):
// the controller-manager, scheduler and kwok stay out of the file.
func auditPolicy(users ...string) string {
	quoted := make([]string, len(users))
	for i, u := range users {
		quoted[i] = fmt.Sprintf("%q", u)
	}
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [` + strings.Join(quoted, ", ") + `]
- level: None
`
}

// auditEvent is the part of an audit.k8s.io/v1 Event the benchmark reads.
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

// counted: one event per request. A watch is counted when it starts (it
// completes minutes later or never); other requests when they complete.
func (e auditEvent) counted() bool {
	if e.Verb == "watch" {
		return e.Stage == "ResponseStarted"
	}
	return e.Stage == "ResponseComplete"
}

func (e auditEvent) resource() string {
	if e.ObjectRef == nil {
		return "(non-resource)"
	}
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}

func (e auditEvent) object() string {
	if e.ObjectRef == nil {
		return ""
	}
	return e.ObjectRef.Namespace + "/" + e.ObjectRef.Name
}

// auditLog reads the kube-apiserver's audit log (JSON lines) as it grows.
type auditLog struct {
	path string
	mu   sync.Mutex
	off  int64        // bytes consumed
	all  []auditEvent // counted events, in file order
}

// refresh reads the complete lines appended since the last call.
func (a *auditLog) refresh() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.Open(a.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(a.off, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return nil // a partial last line is read next time
		}
		if err != nil {
			return err
		}
		a.off += int64(len(line))
		var e auditEvent
		if json.Unmarshal(bytes.TrimSpace(line), &e) != nil || !e.counted() {
			continue
		}
		a.all = append(a.all, e)
	}
}

// mark is a position in the log: the events after it are a phase's.
func (a *auditLog) mark() int {
	_ = a.refresh()
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.all)
}

// since returns user's events after mark.
func (a *auditLog) since(mark int, user string) []auditEvent {
	_ = a.refresh()
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []auditEvent
	for _, e := range a.all[mark:] {
		if e.User.Username == user {
			out = append(out, e)
		}
	}
	return out
}

// waitQuiet returns once user has sent no request for quiet (at least quiet
// from now), or after timeout, and says whether it went quiet.
func (a *auditLog) waitQuiet(user string, quiet, timeout time.Duration) bool {
	last := time.Now()
	m := a.mark()
	_, _, err := testkit.Poll(context.Background(), 250*time.Millisecond, timeout, func(context.Context) (bool, string, error) {
		if ev := a.since(m, user); len(ev) > 0 {
			m += countAll(a, m) // everything up to now is seen
			last = time.Now()
			return false, "", nil
		}
		return time.Since(last) >= quiet, "", nil
	})
	return err == nil
}

// countAll is how many events (of any user) follow mark.
func countAll(a *auditLog, mark int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.all) - mark
}

// requests summarises events.
type requests struct {
	Total       int            `json:"total"`
	ByVerb      map[string]int `json:"byVerb"`
	ByVerbRes   map[string]int `json:"byVerbResource"`
	StatusWrite int            `json:"statusWrites"`
	Events      int            `json:"events"`
	// Objects are the children (not the SimpleWebApp, its status or events)
	// by "verb resource namespace/name", for the small phases.
	Objects []string `json:"objects,omitempty"`
	// MeanMillis is the API server's mean time per request (received to
	// complete), by "verb resource", watches left out.
	MeanMillis map[string]float64 `json:"meanMillisByVerbResource,omitempty"`
}

func summarise(ev []auditEvent, listObjects bool) requests {
	r := requests{ByVerb: map[string]int{}, ByVerbRes: map[string]int{}, MeanMillis: map[string]float64{}}
	timed := map[string]int{}
	for _, e := range ev {
		r.Total++
		if e.Verb != "watch" && !e.RequestReceivedTimestamp.IsZero() {
			k := e.Verb + " " + e.resource()
			r.MeanMillis[k] += float64(e.StageTimestamp.Sub(e.RequestReceivedTimestamp).Microseconds()) / 1000
			timed[k]++
		}
		r.ByVerb[e.Verb]++
		res := e.resource()
		r.ByVerbRes[e.Verb+" "+res]++
		switch {
		case res == "simplewebapps/status" && (e.Verb == "patch" || e.Verb == "update"):
			r.StatusWrite++
		case res == "events" && e.Verb == "create":
			r.Events++
		}
		if listObjects && res != "simplewebapps/status" && res != "events" && res != "simplewebapps" && e.Verb != "watch" && e.Verb != "list" {
			r.Objects = append(r.Objects, e.Verb+" "+res+" "+e.object())
		}
	}
	for k, n := range timed {
		r.MeanMillis[k] /= float64(n)
	}
	return r
}

// slowest formats the n kinds of request with the longest mean time in the
// API server, as "create services 532 ms".
func (r requests) slowest(n int) string {
	keys := make([]string, 0, len(r.MeanMillis))
	for k := range r.MeanMillis {
		if r.ByVerbRes[k] >= 10 { // not the odd discovery request
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return r.MeanMillis[keys[i]] > r.MeanMillis[keys[j]] })
	parts := make([]string, 0, n)
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s %.0f ms", k, r.MeanMillis[k]))
	}
	return strings.Join(parts, ", ")
}

// objectRequests are the requests for children: neither status writes nor
// events.
func (r requests) objectRequests() int { return r.Total - r.StatusWrite - r.Events }

// verbs formats ByVerb as "12 patch, 3 get".
func (r requests) verbs() string {
	type kv struct {
		k string
		v int
	}
	var l []kv
	for k, v := range r.ByVerb {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || l[i].v == l[j].v && l[i].k < l[j].k })
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = fmt.Sprintf("%d %s", e.v, e.k)
	}
	return strings.Join(parts, ", ")
}

// count is how many requests match verb and resource.
func (r requests) count(verb, resource string) int { return r.ByVerbRes[verb+" "+resource] }
