// Server-Sent Events wire framing (text/event-stream): turns an (event, data) pair or a comment into the
// exact bytes of one SSE block. Not the transport (SseStream in responder.h queues these bytes on a
// connection). Invariants: every block ends with a blank line; data is split on CRLF, CR and LF into one
// `data:` line per line (so the client's reassembly gives back the original text with LF separators); an
// empty event name emits no `event:` line; CR/LF inside an event name are dropped.
#pragma once
#include <string>
#include <string_view>

namespace bunsen::server::http {

std::string format_sse_event(std::string_view event, std::string_view data);

// `: text` heartbeat/comment block; multi-line text becomes one `:` line per line.
std::string format_sse_comment(std::string_view text);

}  // namespace bunsen::server::http
