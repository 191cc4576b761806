// jinja::Template (see template.h): parse once into a shared immutable tree; each render gets its own
// Interpreter, so renders never share mutable state.
// Not the HF context (chat_template.cpp).
#include "text/jinja/template.h"

#include "core/status.h"
#include "text/jinja/json.h"
#include "text/jinja/parser.h"

namespace bunsen::text::jinja {

Template::Template(std::string_view source) : body_(std::make_shared<const Body>(parse_template(source))) {}

std::string Template::render(const Dict& context, const Limits& limits) const {
  Interpreter in(context, limits);
  return in.render(*body_);
}

std::string Template::render_json(const nlohmann::ordered_json& context, const Limits& limits) const {
  if (!context.is_object()) fail("the render context must be a JSON object");
  Value v = from_json(context);
  return render(v.dict(), limits);
}

}  // namespace bunsen::text::jinja
