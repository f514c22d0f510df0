package guard

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/reference"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// EventWriter records the reconciler's events (events.k8s.io/v1): each
// Eventf queues one Event, which a few goroutines post. It keeps no copy of
// what it posted. client-go's events broadcaster (what the manager's
// recorder uses) holds every event for minutes to count repeats into a
// series: memory that grows with the fleet's changes (docs/benchmarks.md).
// The reconciler has no repeats
// to count: it records an event when something changed, and a failure once,
// not once per retry (recordEvents).
type EventWriter struct {
	events eventsclient.EventsGetter
	scheme *runtime.Scheme
	// controller and instance are the events' reporting controller and its
	// replica (the pod).
	controller string
	instance   string
	queue      chan *eventsv1.Event
}

const (
	// eventQueue events wait to be posted at most; more are dropped (and
	// logged), as client-go's broadcaster drops them.
	eventQueue   = 1000
	eventWorkers = 4
	// maxEventNote is the API server's limit on an event's note.
	maxEventNote = 1024
)

// NewEventWriter posts events as controller with the manager's config and
// HTTP client (so the lease fence guards them too).
func NewEventWriter(cfg *rest.Config, httpClient *http.Client, scheme *runtime.Scheme, controller string) (*EventWriter, error) {
	c, err := eventsclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname() // the pod's name in a cluster
	return &EventWriter{events: c, scheme: scheme, controller: controller, instance: controller + "-" + host, queue: make(chan *eventsv1.Event, eventQueue)}, nil
}

// Eventf queues an event about regarding (and related, if not nil); it
// never blocks.
func (w *EventWriter) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	logger := log.Log.WithName("events")
	ev, err := w.event(regarding, related, eventtype, reason, action, fmt.Sprintf(note, args...), time.Now())
	if err != nil {
		logger.Error(err, "cannot record an event", "reason", reason)
		return
	}
	select {
	case w.queue <- ev:
	default:
		logger.Info("event queue full, event dropped", "object", ev.Regarding.Namespace+"/"+ev.Regarding.Name, "reason", reason, "note", ev.Note)
	}
}

func (w *EventWriter) event(regarding, related runtime.Object, eventtype, reason, action, note string, now time.Time) (*eventsv1.Event, error) {
	ref, err := reference.GetReference(w.scheme, regarding)
	if err != nil {
		return nil, err
	}
	var rel *corev1.ObjectReference
	if related != nil {
		if rel, err = reference.GetReference(w.scheme, related); err != nil {
			return nil, err
		}
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return &eventsv1.Event{
		// The name client-go gives events.
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%v.%x", ref.Name, now.UnixNano()), Namespace: ns},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: w.controller,
		ReportingInstance:   w.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             rel,
		Note:                truncate(note, maxEventNote),
		Type:                eventtype,
	}, nil
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Start posts queued events until ctx ends: a manager Runnable, on every
// replica (only the leader reconciles, so only it records).
func (w *EventWriter) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range eventWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case ev := <-w.queue:
					w.post(ctx, ev)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// NeedLeaderElection is false: events queued before the lease is won are posted too.
func (w *EventWriter) NeedLeaderElection() bool { return false }

// eventRetry retries a post that failed for a reason that may pass (the API
// server busy or restarting) for about 3.5 s.
var eventRetry = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 3}

func (w *EventWriter) post(ctx context.Context, ev *eventsv1.Event) {
	logger := log.FromContext(ctx).WithName("events")
	err := retry.OnError(eventRetry, func(err error) bool {
		return !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) && !apierrors.IsAlreadyExists(err) &&
			!apierrors.IsNotFound(err) && ctx.Err() == nil
	}, func() error {
		_, err := w.events.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
		return err
	})
	if err != nil && ctx.Err() == nil {
		logger.Error(err, "event not recorded", "object", ev.Regarding.Namespace+"/"+ev.Regarding.Name, "reason", ev.Reason, "note", ev.Note)
		return
	}
	logger.V(1).Info(ev.Note, "type", ev.Type, "object", ev.Regarding.Namespace+"/"+ev.Regarding.Name, "reason", ev.Reason)
}
