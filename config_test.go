package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/simplewebapp-operator/controllers"
)

func TestParseNamespaces(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "", want: nil},
		{in: " , ,", want: nil},
		{in: "a", want: []string{"a"}},
		{in: "team-b, a,team-b ,a", want: []string{"a", "team-b"}},
		{in: "a,Team", err: `namespace "Team"`},
		{in: "a,b/c", err: `namespace "b/c"`},
		{in: strings.Repeat("x", 64), err: "must be no more than 63"},
	} {
		got, err := parseNamespaces(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseNamespaces(%q): error %v, want one with %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("parseNamespaces(%q): %v", tc.in, err)
		case tc.err == "" && !slices.Equal(got, tc.want):
			t.Errorf("parseNamespaces(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Flags are read into a Config and checked as a whole before anything
// starts; each invalid combination is refused naming the flag.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		err  string // "" when valid
		test func(*Config) bool
	}{
		{"defaults", nil, "", func(c *Config) bool {
			return c.MetricsAddr == ":8443" && c.MetricsSecure && c.Workers == 16 && c.Upgrades == 20 &&
				c.StatusDelay == 500*time.Millisecond && !c.LeaderElect && c.shard.Empty() && c.namespaces == nil &&
				c.renderCacheBytes == controllers.DefaultRenderCacheBytes
		}},
		{"a render cache as a quantity", []string{"--render-cache-bytes=64Mi"}, "", func(c *Config) bool { return c.renderCacheBytes == 64<<20 }},
		{"a render cache in bytes", []string{"--render-cache-bytes=1000000"}, "", func(c *Config) bool { return c.renderCacheBytes == 1000000 }},
		{"a render cache that is no quantity", []string{"--render-cache-bytes=lots"}, "--render-cache-bytes", nil},
		{"an empty render cache", []string{"--render-cache-bytes=0"}, "--render-cache-bytes: \"0\" is not a positive number of bytes", nil},
		{"a negative render cache", []string{"--render-cache-bytes=-1Mi"}, "--render-cache-bytes", nil},
		{"shard and namespaces derived", []string{"--watch-label-selector=shard=a", "--watch-namespaces=b,a"}, "", func(c *Config) bool {
			return c.shard.String() == "shard=a" && slices.Equal(c.namespaces, []string{"a", "b"})
		}},
		{"a channels directory that exists", []string{"--channels-dir=" + dir}, "", func(c *Config) bool { return c.ChannelsDir == dir }},
		{"a channels directory that does not", []string{"--channels-dir=" + dir + "/nope"}, "--channels-dir", nil},
		{"a bad selector", []string{"--watch-label-selector=a in (b"}, "--watch-label-selector", nil},
		{"a bad namespace", []string{"--watch-namespaces=A"}, "--watch-namespaces", nil},
		{"lease not longer than renew", []string{"--leader-elect-lease-duration=10s"}, "must be greater than --leader-elect-renew-deadline", nil},
		{"renew too short for the retry period", []string{"--leader-elect-renew-deadline=2s"}, "1.2 × --leader-elect-retry-period", nil},
		{"a zero retry period", []string{"--leader-elect-retry-period=0s"}, "must be positive", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, false)
			if err != nil {
				t.Fatal(err)
			}
			err = c.validate()
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("validate: %v, want an error with %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tc.test != nil && !tc.test(c):
				t.Fatalf("config %+v", c)
			}
		})
	}
	// In a pod, leader election is on by default.
	if c, err := parseFlags(nil, true); err != nil || !c.LeaderElect {
		t.Errorf("in cluster: LeaderElect = %v (%v), want true", c.LeaderElect, err)
	}
}
