// SseGate: the ordered SSE output of one streaming request, usable before the stream exists. A dialect
// queues its preamble (message_start, response.created, ...) and calls ModelService::start(); only when
// start() did not throw does it open the 200 event-stream and flush, so an error before any SSE byte still
// gets a JSON error body. Events the generation sends meanwhile (event relay thread) are held in order. Not
// the framing (http::SseStream does that); shared by the Anthropic and Responses dialects. Invariants: events
// reach the stream in send() order; after close() nothing more is written and the stream handle is released
// (breaking the sink -> stream -> on_disconnect reference chain).
#pragma once
#include <mutex>
#include <string>
#include <vector>

#include "server/http/responder.h"

namespace bunsen::server {

class SseGate {
 public:
  // Queues (or writes, once open) one event; a ":" comment when `comment` is true.
  void send(std::string event, std::string data, bool comment = false);
  // Starts writing to `stream`: flushes what is held, then closes it if close() already ran.
  void open(http::SseStream stream);
  // Ends the stream (now if open, else right after open()); idempotent.
  void close();
  // Drops everything held without writing (the request failed before the stream opened).
  void discard();

 private:
  struct Held {
    std::string event, data;
    bool comment = false;
  };
  void write_locked(const Held& h);

  std::mutex mu_;
  http::SseStream stream_;
  bool open_ = false;
  bool closed_ = false;
  std::vector<Held> held_;
};

}  // namespace bunsen::server
