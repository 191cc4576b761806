// The tree-walking evaluator: statements write into output buffers, expressions produce Values, with
// jinja2's sandboxed attribute/item lookup, scoping (a fresh scope per loop iteration, macro call, with,
// filter and set block; `if` shares its scope) and bounded work (steps, nesting depth, output size).
// Not the parser and not the builtins (filters.cpp, tests.cpp, methods.cpp, globals.cpp).
// Invariants: every recursive entry goes through a DepthGuard; every loop iteration and node visit
// charges a step; every string that grows is checked against the output limit.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace bunsen::text::jinja {

struct Limits {
  int64_t max_steps = 20'000'000;         // node visits + loop iterations + proportional charges
  int max_depth = 500;                     // nested evaluation frames (expressions, blocks, macro calls)
  size_t max_output_bytes = 64u << 20;     // any single string, including the result
};

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value v);
  const std::shared_ptr<Scope>& parent() const { return parent_; }

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const Dict& context, const Limits& limits) : context_(context), limits_(limits) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;
  std::string render(const Body& body);
  // Wraps an object that may hold scopes or values; it is release()d when this interpreter ends.
  Value own(std::shared_ptr<Object> o);

  // Evaluation (eval_expr.cpp / eval_stmt.cpp).
  Value eval(const Expr& e, const ScopePtr& scope);
  Flow exec(const Body& body, const ScopePtr& scope, std::string& out);
  std::string render_body(const Body& body, const ScopePtr& scope);  // a macro/caller/block body

  // jinja2 sandbox semantics used by the builtins too.
  Value getattr(const Value& obj, std::string_view name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& callee, CallArgs& args);
  List iterate(const Value& v);  // Python iter(): str -> chars, dict -> keys, Undefined -> empty
  Value resolve(std::string_view name, const Scope& scope) const;

  void step(int64_t n = 1);
  void check_size(size_t bytes) const;
  bool autoescape() const { return autoescape_; }
  const Limits& limits() const { return limits_; }
  const ScopePtr& root() const { return root_; }

  class DepthGuard {
   public:
    explicit DepthGuard(Interpreter& in);
    ~DepthGuard() { --in_.depth_; }

   private:
    Interpreter& in_;
  };

  // Statement helpers (eval_stmt.cpp), used by loop objects for recursive loops.
  std::string run_for(const Stmt& s, const Value& iterable, const ScopePtr& scope, int depth);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);

 private:
  Flow exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out);
  void loop_into(const Stmt& s, const Value& iterable, const ScopePtr& scope, int depth, std::string& out);
  void emit(std::string& out, const Value& v);
  void assign(const Target& t, const Value& v, const ScopePtr& scope);
  Value apply_filter_chain(const Expr& chain, Value input, const ScopePtr& scope);
  Value eval_call(const Expr& e, const ScopePtr& scope);
  void eval_call_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& out);
  Value eval_compare(const Expr& e, const ScopePtr& scope);
  Value eval_slice(const Expr& e, const ScopePtr& scope);
  Value make_macro(const Stmt& def, const ScopePtr& scope, std::string name);

  const Dict& context_;
  Limits limits_;
  ScopePtr root_;
  int64_t steps_ = 0;
  int depth_ = 0;
  bool autoescape_ = false;
  std::vector<std::weak_ptr<Object>> owned_;
  size_t prune_at_ = 1024;
};

}  // namespace bunsen::text::jinja
