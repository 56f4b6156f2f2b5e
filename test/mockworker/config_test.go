package mockworker

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfig_ZeroValueTakesDefaults(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("Config{}.Validate() = %v, want nil", err)
	}
	c := Config{}.withDefaults()
	if c.ID != DefaultID || c.Model != DefaultModel || c.MaxNumSeqs != DefaultMaxNumSeqs ||
		c.PrefillTokensPerSec != DefaultPrefillTokensPerSec || c.DecodeTokensPerSec != DefaultDecodeTokensPerSec ||
		c.BlockSize != DefaultBlockSize || c.CacheBlocks != DefaultCacheBlocks || c.Speed != DefaultSpeed ||
		c.DefaultMaxTokens != DefaultMaxTokens || c.MaxModelLen != DefaultMaxModelLen ||
		c.MaxRecords != DefaultMaxRecords || c.MaxBodyBytes != DefaultMaxBodyBytes || c.Logger == nil ||
		c.Role != RoleBoth || c.PrefillTimeout != DefaultPrefillTimeout {
		t.Errorf("withDefaults() = %+v, want every default", c)
	}
}

func TestConfig_ValidateNamesEveryBadField(t *testing.T) {
	err := Config{
		MaxNumSeqs: -1, PrefillTokensPerSec: math.NaN(), DecodeTokensPerSec: math.Inf(1),
		BlockSize: -2, CacheBlocks: -3, Speed: -1, DefaultMaxTokens: -4, MaxModelLen: -5, MaxRecords: -6, MaxBodyBytes: -7,
		Role: "encode", PrefillTimeout: -time.Second,
	}.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want errors")
	}
	for _, want := range []string{
		"max num seqs must not be negative, got -1",
		"prefill tokens per second must be a finite non-negative number, got NaN",
		"decode tokens per second must be a finite non-negative number, got +Inf",
		"block size must not be negative, got -2",
		"cache blocks must not be negative, got -3",
		"speed must be a finite non-negative number, got -1",
		"default max tokens must not be negative, got -4",
		"max model len must not be negative, got -5",
		"max records must not be negative, got -6",
		"max body bytes must not be negative, got -7",
		`role must be both, prefill or decode, got "encode"`,
		"prefill timeout must not be negative, got -1s",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, missing %q", err, want)
		}
	}
}

func TestConfig_DefaultMaxTokensWithinModelLen(t *testing.T) {
	err := Config{DefaultMaxTokens: 100, MaxModelLen: 50}.Validate()
	if err == nil || !strings.Contains(err.Error(), "default max tokens 100 exceeds max model len 50") {
		t.Errorf("Validate() = %v, want the max model len error", err)
	}
}

func TestConfig_DurationsScaleWithSpeed(t *testing.T) {
	c := Config{PrefillTokensPerSec: 1000, DecodeTokensPerSec: 50, Speed: 10}.withDefaults()
	if got := c.prefillTime(1000); got != 100*time.Millisecond {
		t.Errorf("prefillTime(1000) = %v, want 100ms", got)
	}
	if got := c.decodeTime(5); got != 10*time.Millisecond {
		t.Errorf("decodeTime(5) = %v, want 10ms", got)
	}
}
