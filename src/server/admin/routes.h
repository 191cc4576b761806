// Admin routes: GET /health (liveness, no auth), GET /stats (JSON: server, model, uptime, requests,
// tokens, queue, KV use, prompt cache, admission limits, batch settings) and GET /metrics (Prometheus
// text: the service's Metrics plus engine gauges). Not the dialects and not the engine: everything is read
// from ModelService::metrics() and Backend::stats() snapshots. Invariant: these handlers never block on
// the engine loop (stats() is a snapshot under a short lock), so they answer while generation runs.
#pragma once
#include <cstdint>
#include <string>

#include "server/api/service.h"
#include "server/http/router.h"

namespace bunsen::server {

// What the admin routes report that neither the service nor the backend knows (set by `bunsen serve`).
struct AdminInfo {
  std::string version;                // bunsen version
  std::string backend = "engine";     // "engine" or "replay" (tests)
  int64_t max_context = 0;            // tokens one sequence may hold (--ctx)
  int64_t max_batch = 0;              // --batch
  int64_t max_num_batched_tokens = 0; // --max-num-batched-tokens
  int64_t kv_pool_bytes = 0;          // memory of the KV pool
  std::string kv_dtype;               // "f32", "bf16", ...
  int64_t weights_bytes = 0;          // size of the loaded weights
};

void register_admin_routes(http::Router& router, ModelService& service, const AdminInfo& info);

namespace admin {
// The /stats body and the /metrics text (exposed for unit tests).
nlohmann::json stats_json(ModelService& service, const AdminInfo& info);
std::string metrics_text(ModelService& service);
}  // namespace admin

}  // namespace bunsen::server
