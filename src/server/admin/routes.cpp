// Admin route handlers (see routes.h): health, stats JSON and Prometheus metrics. Each handler reads
// snapshots only (Metrics under its own mutex, Backend::stats() under the engine's short lock) and
// answers synchronously on the IO thread. Not a place for engine control (no cancel/flush routes here).
#include "server/admin/routes.h"

#include "core/status.h"

namespace bunsen::server {
namespace admin {
namespace {

double ratio(int64_t num, int64_t den) { return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 0.0; }

// One Prometheus gauge: HELP, TYPE and the sample line.
std::string metric(const char* type, const std::string& name, const std::string& help, double value) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         strfmt("%.15g", value) + "\n";
}
std::string gauge(const std::string& name, const std::string& help, double value) {
  return metric("gauge", name, help, value);
}
std::string counter(const std::string& name, const std::string& help, int64_t value) {
  return metric("counter", name, help, static_cast<double>(value));
}

http::Response json_response(const nlohmann::json& body) {
  http::Response r = http::Response::json(200, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  r.headers.set("Cache-Control", "no-store");
  return r;
}

}  // namespace

nlohmann::json stats_json(ModelService& service, const AdminInfo& info) {
  const ModelServiceConfig& cfg = service.config();
  const engine::EngineStats es = service.backend().stats();
  Metrics& m = service.metrics();
  nlohmann::json mj = m.json();
  nlohmann::json j;
  j["server"] = {{"name", "bunsen"}, {"version", info.version}, {"backend", info.backend}};
  j["model"] = {{"id", cfg.model_id},
                {"dir", cfg.model_dir},
                {"device", cfg.device},
                {"parser_family", cfg.parser_family},
                {"weights_bytes", info.weights_bytes}};
  j["uptime_s"] = m.uptime_seconds();
  j["requests"] = mj.value("requests", nlohmann::json::object());
  j["tokens"] = mj.value("tokens", nlohmann::json::object());
  j["latency"] = {{"ttft", mj.value("ttft", nlohmann::json::object())},
                  {"itl", mj.value("itl", nlohmann::json::object())},
                  {"e2e", mj.value("e2e", nlohmann::json::object())}};
  j["queue"] = {{"running", es.running}, {"waiting", es.waiting}};
  j["kv"] = {{"blocks_total", es.kv_blocks_total},
             {"blocks_free", es.kv_blocks_free},
             {"blocks_used", es.kv_blocks_total - es.kv_blocks_free},
             {"block_size", es.block_size},
             {"bytes", info.kv_pool_bytes},
             {"dtype", info.kv_dtype}};
  if (es.kv_sliding_blocks_total > 0)  // sliding-window layers' own block space (Gemma 2/3/4)
    j["kv"]["sliding"] = {{"window", es.kv_sliding_window},
                          {"blocks_total", es.kv_sliding_blocks_total},
                          {"blocks_free", es.kv_sliding_blocks_free},
                          {"blocks_used", es.kv_sliding_blocks_total - es.kv_sliding_blocks_free}};
  // Prefix cache, device tier: hits/misses in full blocks looked up at admission, hit_ratio over tokens.
  j["prompt_cache"] = {{"enabled", es.prefix_cache_enabled},
                       {"entries", es.prefix_cache_entries},
                       {"bytes", es.prefix_cache_bytes},
                       {"hits", es.prefix_cache_hits},
                       {"misses", es.prefix_cache_misses},
                       {"hit_ratio", es.prefix_cache_hit_ratio},
                       {"hit_tokens", es.prefix_cache_hit_tokens},
                       {"miss_tokens", es.prefix_cache_miss_tokens},
                       {"evictions", es.prefix_cache_evictions},
                       {"tiers", {{"device", {{"entries", es.prefix_cache_entries},
                                              {"bytes", es.prefix_cache_bytes},
                                              {"hits", es.prefix_cache_hits},
                                              {"misses", es.prefix_cache_misses},
                                              {"hit_ratio", es.prefix_cache_hit_ratio}}},
                                  {"ram", {{"enabled", es.ram_cache_enabled},
                                           {"capacity_blocks", es.ram_cache_capacity_blocks},
                                           {"entries", es.ram_cache_entries},
                                           {"bytes", es.ram_cache_bytes},
                                           {"stores", es.ram_cache_stores},
                                           {"evictions", es.ram_cache_evictions},
                                           {"hits", es.ram_cache_hits},
                                           {"hit_tokens", es.ram_cache_hit_tokens}}},
                                  {"ssd", {{"enabled", es.ssd_cache_enabled},
                                           {"entries", es.ssd_cache_entries},
                                           {"bytes", es.ssd_cache_bytes},
                                           {"hits", es.ssd_cache_hits},
                                           {"misses", es.ssd_cache_misses},
                                           {"hit_tokens", es.ssd_cache_hit_tokens}}}}}};
  if (es.state_checkpoint_slots > 0)  // hybrid (DeltaNet) models: the linear-attention state at block boundaries
    j["prompt_cache"]["state_checkpoints"] = {{"slots", es.state_checkpoint_slots},
                                              {"entries", es.state_checkpoint_entries},
                                              {"hits", es.state_checkpoint_hits},
                                              {"saves", es.state_checkpoint_saves},
                                              {"evictions", es.state_checkpoint_evictions}};
  if (es.ram_cache_sliding_capacity_blocks > 0)  // the RAM tier's part for the sliding-window block space
    j["prompt_cache"]["tiers"]["ram"]["sliding"] = {{"capacity_blocks", es.ram_cache_sliding_capacity_blocks},
                                                    {"entries", es.ram_cache_sliding_entries},
                                                    {"bytes", es.ram_cache_sliding_bytes},
                                                    {"stores", es.ram_cache_sliding_stores},
                                                    {"evictions", es.ram_cache_sliding_evictions},
                                                    {"hit_tokens", es.ram_cache_sliding_hit_tokens}};
  if (es.ram_cache_state_capacity > 0)  // the RAM tier's linear-attention checkpoints (hybrid models)
    j["prompt_cache"]["tiers"]["ram"]["state_checkpoints"] = {{"capacity", es.ram_cache_state_capacity},
                                                              {"entries", es.ram_cache_state_entries},
                                                              {"bytes", es.ram_cache_state_bytes},
                                                              {"stores", es.ram_cache_state_stores},
                                                              {"evictions", es.ram_cache_state_evictions},
                                                              {"hits", es.ram_cache_state_hits}};
  // SSD tier: hits/misses count lookups of prompts the device tier did not fully cover.
  j["ssd"] = {{"enabled", es.ssd_cache_enabled},
              {"entries", es.ssd_cache_entries},
              {"bytes", es.ssd_cache_bytes},
              {"hits", es.ssd_cache_hits},
              {"misses", es.ssd_cache_misses},
              {"hit_tokens", es.ssd_cache_hit_tokens},
              {"writes", es.ssd_cache_writes},
              {"write_failures", es.ssd_cache_write_failures},
              {"quarantined", es.ssd_cache_quarantined},
              {"evictions", es.ssd_cache_evictions},
              {"dropped", es.ssd_cache_dropped},
              {"restored_bytes", es.ssd_cache_restored_bytes},
              {"restore_s", es.ssd_cache_restore_s},
              {"restores_pending", es.ssd_cache_restores_pending}};
  j["admission"] = {{"max_request_tokens", service.backend().max_request_tokens()},
                    {"max_context", info.max_context}};
  j["batch"] = {{"max_batch", es.max_batch > 0 ? es.max_batch : info.max_batch},
                {"max_num_batched_tokens", es.max_num_batched_tokens > 0 ? es.max_num_batched_tokens
                                                                        : info.max_num_batched_tokens}};
  j["engine"] = {{"steps", es.steps},
                 {"decode_steps", es.decode_steps},
                 {"schedule_s", es.schedule_s},
                 {"decode_forward_s", es.decode_forward_s},
                 {"mixed_forward_s", es.mixed_forward_s},
                 {"sampling_s", es.sampling_s},
                 {"events_s", es.events_s},
                 {"preemptions", es.preemptions},
                 {"requests_finished", es.requests_finished},
                 {"prompt_tokens", es.prompt_tokens},
                 {"generated_tokens", es.generated_tokens}};
  return j;
}

std::string metrics_text(ModelService& service) {
  const engine::EngineStats es = service.backend().stats();
  Metrics& m = service.metrics();
  std::string out = m.prometheus();
  out += gauge("bunsen_running_sequences", "Sequences in the engine's running set.", static_cast<double>(es.running));
  out += gauge("bunsen_waiting_sequences", "Sequences queued (including preempted ones).",
               static_cast<double>(es.waiting));
  out += gauge("bunsen_kv_blocks_used", "KV cache blocks in use.",
               static_cast<double>(es.kv_blocks_total - es.kv_blocks_free));
  out += gauge("bunsen_kv_blocks_free", "KV cache blocks free.", static_cast<double>(es.kv_blocks_free));
  out += gauge("bunsen_kv_blocks_total", "KV cache blocks in the pool.", static_cast<double>(es.kv_blocks_total));
  if (es.kv_sliding_blocks_total > 0) {
    out += gauge("bunsen_kv_sliding_blocks_free", "Sliding-window KV blocks free (or evictable).",
                 static_cast<double>(es.kv_sliding_blocks_free));
    out += gauge("bunsen_kv_sliding_blocks_total", "Sliding-window KV blocks in their pool.",
                 static_cast<double>(es.kv_sliding_blocks_total));
  }
  out += gauge("bunsen_prefix_cache_hit_ratio", "Prompt tokens served from the prefix cache / prompt tokens.",
               ratio(m.cached_tokens(), m.prompt_tokens()));
  out += gauge("bunsen_prefix_cache_entries", "KV blocks held by the prefix cache (device tier).",
               static_cast<double>(es.prefix_cache_entries));
  out += gauge("bunsen_prefix_cache_bytes", "Device memory of the prefix cache's blocks.",
               static_cast<double>(es.prefix_cache_bytes));
  out += gauge("bunsen_prefix_cache_hits", "Full KV blocks found in the prefix cache at admission.",
               static_cast<double>(es.prefix_cache_hits));
  out += gauge("bunsen_prefix_cache_misses", "Full KV blocks looked up at admission and not found.",
               static_cast<double>(es.prefix_cache_misses));
  out += gauge("bunsen_ram_cache_entries", "KV blocks held by the RAM tier of the prefix cache.",
               static_cast<double>(es.ram_cache_entries));
  out += gauge("bunsen_ram_cache_bytes", "Pinned host bytes used by the RAM tier's blocks.",
               static_cast<double>(es.ram_cache_bytes));
  out += counter("bunsen_ram_cache_stores_total", "Blocks evicted from the device and kept in RAM.",
                 es.ram_cache_stores);
  out += counter("bunsen_ram_cache_hits_total", "Prompts restored (partly) from the RAM tier.", es.ram_cache_hits);
  out += counter("bunsen_ram_cache_hit_tokens_total", "Prompt tokens restored from the RAM tier.",
                 es.ram_cache_hit_tokens);
  if (es.state_checkpoint_slots > 0) {
    out += gauge("bunsen_state_checkpoints", "Linear-attention state checkpoints held (hybrid models).",
                 static_cast<double>(es.state_checkpoint_entries));
    out += counter("bunsen_state_checkpoint_hits_total", "Prefix hits that resumed from a state checkpoint.",
                   es.state_checkpoint_hits);
  }
  if (es.ram_cache_state_capacity > 0) {
    out += gauge("bunsen_ram_cache_state_checkpoints", "Linear-attention checkpoints held by the RAM tier.",
                 static_cast<double>(es.ram_cache_state_entries));
    out += gauge("bunsen_ram_cache_state_bytes", "Host bytes used by the RAM tier's checkpoints.",
                 static_cast<double>(es.ram_cache_state_bytes));
    out += counter("bunsen_ram_cache_state_hits_total", "State checkpoints restored from the RAM tier.",
                   es.ram_cache_state_hits);
  }
  out += gauge("bunsen_ssd_cache_enabled", "1 while the SSD tier of the prefix cache is on.",
               es.ssd_cache_enabled ? 1.0 : 0.0);
  out += gauge("bunsen_ssd_cache_entries", "Prefix snapshots on disk.", static_cast<double>(es.ssd_cache_entries));
  out += gauge("bunsen_ssd_cache_bytes", "Bytes of the prefix snapshots on disk.",
               static_cast<double>(es.ssd_cache_bytes));
  out += counter("bunsen_ssd_cache_hits_total", "Prompts restored (partly) from the SSD tier.", es.ssd_cache_hits);
  out += counter("bunsen_ssd_cache_misses_total", "SSD tier lookups that found nothing usable.",
                 es.ssd_cache_misses);
  out += counter("bunsen_ssd_cache_writes_total", "Prefix snapshots written to disk.", es.ssd_cache_writes);
  out += counter("bunsen_ssd_cache_write_failures_total", "Failed snapshot writes.", es.ssd_cache_write_failures);
  out += counter("bunsen_ssd_cache_quarantined_total", "Damaged snapshots moved to quarantine/.",
                 es.ssd_cache_quarantined);
  out += counter("bunsen_ssd_cache_evictions_total", "Snapshots evicted by the byte cap.", es.ssd_cache_evictions);
  out += counter("bunsen_ssd_cache_restored_bytes_total", "Payload bytes restores from the SSD tier copied into KV blocks.",
                 es.ssd_cache_restored_bytes);
  out += metric("counter", "bunsen_ssd_cache_restore_seconds_total",
                "Seconds restores from the SSD tier took (submission to the last copy landing).", es.ssd_cache_restore_s);
  out += gauge("bunsen_ssd_cache_restores_pending", "Restores from the SSD tier in flight.",
               static_cast<double>(es.ssd_cache_restores_pending));
  out += gauge("bunsen_engine_steps", "Forward passes run by the engine.", static_cast<double>(es.steps));
  return out;
}

}  // namespace admin

void register_admin_routes(http::Router& router, ModelService& service, const AdminInfo& info) {
  http::RouteOptions open;
  open.requires_auth = false;
  router.add("GET", "/health", http::SyncHandler([&service](http::Request&) {
               service.metrics().record_request("/health", 200);
               return admin::json_response({{"status", "ok"}});
             }),
             open);
  router.add("GET", "/stats", http::SyncHandler([&service, info](http::Request&) {
               service.metrics().record_request("/stats", 200);
               return admin::json_response(admin::stats_json(service, info));
             }));
  router.add("GET", "/metrics", http::SyncHandler([&service](http::Request&) {
               service.metrics().record_request("/metrics", 200);
               http::Response r = http::Response::text(200, admin::metrics_text(service),
                                                       "text/plain; version=0.0.4; charset=utf-8");
               r.headers.set("Cache-Control", "no-store");
               return r;
             }));
}

}  // namespace bunsen::server
