package rlqs

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// View is what /debug/rlqs shows: the assignments held now, rule by rule.
// It names no bucket: a BucketId's values are the client's.
type View struct {
	Streams int        `json:"streams"`
	Rules   []RuleView `json:"rules"`
}

// RuleView is one rule's buckets with subscriptions.
type RuleView struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	// Buckets are its buckets subscribed by some stream; Subscriptions
	// the (stream, bucket) pairs, TokenBuckets those holding a token
	// bucket now.
	Buckets       int `json:"buckets"`
	Subscriptions int `json:"subscriptions"`
	TokenBuckets  int `json:"token_buckets"`
	// PerFill is the rule's requests per FillInterval; Leased the sum of
	// the token buckets' tokens_per_fill (at most PerFill per bucket).
	PerFill      int64  `json:"per_fill"`
	Leased       int64  `json:"leased_per_fill"`
	FillInterval string `json:"fill_interval"`
}

// View returns the assignments at now.
func (s *Service) View(now int64) View {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := View{Streams: len(s.streams)}
	byRule := map[[2]string]*RuleView{}
	for _, sh := range s.buckets {
		k := [2]string{sh.rule.Domain, sh.rule.Name}
		rv := byRule[k]
		if rv == nil {
			rv = &RuleView{Domain: k[0], Rule: k[1], PerFill: sh.fill.tokens, FillInterval: time.Duration(sh.fill.interval).String()}
			byRule[k] = rv
		}
		rv.Buckets++
		sh.mu.Lock()
		for _, sb := range sh.subs {
			rv.Subscriptions++
			if sb.lease.k > 0 && now < sb.lease.expires {
				rv.TokenBuckets++
				rv.Leased += sb.lease.k
			}
		}
		sh.mu.Unlock()
	}
	for _, rv := range byRule {
		v.Rules = append(v.Rules, *rv)
	}
	slices.SortFunc(v.Rules, func(a, b RuleView) int {
		return strings.Compare(a.Domain+"\x00"+a.Rule, b.Domain+"\x00"+b.Rule)
	})
	return v
}

// Handler serves View as JSON.
func (s *Service) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(s.View(s.opts.Clock.Now()))
	})
}
