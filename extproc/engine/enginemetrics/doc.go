// Package enginemetrics reads the model servers' own Prometheus endpoints
// (vLLM and SGLang) so the scheduler can correct its bookings with what the
// engines report: waiting and running requests, KV-cache usage and size,
// the running-request limit, LoRA adapters, per DP rank.
//
// A Scraper polls every target's metrics URL on its own goroutine, every
// interval with jitter, at most MaxInFlight scrapes at a time across all
// targets, each bounded by a timeout and a body size limit. Results are
// batched: five times per interval (and as soon as every target has been
// tried once after a start) the Scraper hands one Round, the loads read
// since the last round and the failures, to its sink. A failed scrape is counted
// and only leaves that worker's last report to age; it never blocks the
// sink or the other targets. The Scraper owns its goroutines; Run returns
// after every one has ended.
//
// Parse turns one exposition into per-rank loads; it knows the vLLM names
// (vllm:num_requests_waiting, vllm:num_requests_running,
// vllm:kv_cache_usage_perc and the older vllm:gpu_cache_usage_perc,
// vllm:cache_config_info, vllm:lora_requests_info) and the SGLang names
// (sglang:num_queue_reqs, sglang:num_running_reqs, sglang:token_usage,
// sglang:cache_config_info, sglang:max_running_requests). The DP rank comes
// from the engine (vLLM), dp_rank or data_parallel_rank label; series of
// several models on one rank are summed.
package enginemetrics
