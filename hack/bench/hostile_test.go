package main

import "testing"

// A round with bombs is compared with the mean of the rounds without bombs
// around it, so a cluster that slows as objects accumulate does not count
// against the bombs; the rounds without bombs have ratio 1.
func TestBracketRatios(t *testing.T) {
	rounds := []hostileRound{
		{Bombs: 0, ReadySeconds: 4, AfterSeconds: 4},
		{Bombs: 3, ReadySeconds: 7.5, AfterSeconds: 9},
		{Bombs: 0, ReadySeconds: 6, AfterSeconds: 8},
		{Bombs: 30, ReadySeconds: 18, AfterSeconds: 4},
		{Bombs: 0, ReadySeconds: 12, AfterSeconds: 8},
	}
	bracketRatios(rounds)
	for i, want := range [][2]float64{{1, 1}, {1.5, 1.5}, {1, 1}, {2, 0.5}, {1, 1}} {
		if r := rounds[i]; r.Ratio != want[0] || r.AfterRatio != want[1] {
			t.Errorf("round %d (%d bombs): ratios %.3f, %.3f, want %.3f, %.3f", i, r.Bombs, r.Ratio, r.AfterRatio, want[0], want[1])
		}
	}
}
