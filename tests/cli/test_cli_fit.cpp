// Black-box tests of `bunsen fit` and `bunsen benchmark --serve` on the real binary: the demo model's
// weight bytes equal its safetensors data section and its hand-computed parameter count, KV bytes per
// token from its config, the CPU row fits with the context capped at the model's maximum; --skus lists
// the six datasheet GPUs for the Llama-3.1-8B shape; one-line errors with exit codes; and a serving
// benchmark against a real `bunsen serve --port 0` of the demo model.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace bunsen {
namespace {

namespace fs = std::filesystem;
using cli_test::Proc;
using nlohmann::json;

std::string cache() {
  return cli_test::shared_cache();
}
Proc run(const std::string& args) {
  return cli_test::run_cached(args);
}

const json* target(const json& list, const std::string& name) {
  for (const json& t : list)
    if (t.at("target") == name) return &t;
  return nullptr;
}

// Bytes of a safetensors file's data section: file size − 8 − header length (read independently).
uint64_t safetensors_data_bytes(const fs::path& file) {
  std::ifstream f(file, std::ios::binary);
  uint64_t header = 0;
  f.read(reinterpret_cast<char*>(&header), 8);
  return fs::file_size(file) - 8 - header;
}

TEST(CliFit, DemoModelJson) {
  Proc r = run("fit --json --no-probe");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  const fs::path demo = fs::path(cache()) / "models" / "demo-qwen3-tiny";
  EXPECT_EQ(j["model"]["weight_bytes"].get<uint64_t>(), safetensors_data_bytes(demo / "model.safetensors"));
  // Demo config: V 151936, d 64, 2 layers, 4 heads / 2 kv heads × 16, d_ff 128, tied, q/k norms:
  // V·d + 2·(d·64 + 2·d·32 + 64·d + 3·d·128 + 2·d + 2·16) + d = 9,798,016 params, bf16.
  EXPECT_EQ(j["model"]["params"].get<uint64_t>(), 9'798'016u);
  EXPECT_EQ(j["model"]["weight_bytes"].get<uint64_t>(), 2u * 9'798'016u);
  EXPECT_EQ(j["model"]["weight_read_bytes"], j["model"]["weight_bytes"]);  // tied: the whole table is the head
  EXPECT_EQ(j["model"]["kv_bytes_per_token_f32"].get<uint64_t>(), 2u * 2 * 2 * 16 * 4);
  EXPECT_EQ(j["model"]["kv_bytes_per_token_bf16"].get<uint64_t>(), 2u * 2 * 2 * 16 * 2);
  EXPECT_EQ(j["request"]["ctx"], 4096);
  const json* cpu = target(j["machine"], "cpu");
  ASSERT_NE(cpu, nullptr) << r.out;
  EXPECT_EQ((*cpu)["kv_dtype"], "f32");
  EXPECT_TRUE((*cpu)["fits"].get<bool>());
  EXPECT_EQ((*cpu)["max_context"], 40960);  // capped at max_position_embeddings
  EXPECT_GT((*cpu)["concurrent_seqs"].get<int64_t>(), 0);
  EXPECT_EQ((*cpu)["decode_tok_s"], 0.0);  // --no-probe: no bandwidth, no prediction
  EXPECT_TRUE(j["skus"].empty());

  Proc same = run("fit --json --no-probe " + demo.string());  // the directory as an argument
  ASSERT_EQ(same.code, 0) << same.err;
  EXPECT_EQ(json::parse(same.out)["model"]["weight_bytes"], j["model"]["weight_bytes"]);
}

TEST(CliFit, SkusForTheLlama8bShape) {
  Proc r = run("fit --synthetic llama3.1-8b --skus --json --no-probe --ctx 8192 --batch 4");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["model"]["weight_bytes"].get<uint64_t>(), 16'060'522'496u);
  EXPECT_EQ(j["model"]["kv_bytes_per_token_bf16"].get<uint64_t>(), 131072u);
  ASSERT_EQ(j["skus"].size(), 6u);
  for (const char* name : {"H100 SXM", "H200", "A100 80GB", "L40S", "RTX 4090", "RTX 5090"}) {
    const json* t = target(j["skus"], name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_TRUE((*t)["fits"].get<bool>()) << name;
    EXPECT_GT((*t)["decode_tok_s"].get<double>(), 0) << name;
    EXPECT_EQ((*t)["efficiency"], 0.85) << name;
  }
  EXPECT_EQ((*target(j["skus"], "H200"))["max_context"], 131072);
  // tok/s ranks with bandwidth: H200 4.8 > H100 3.35 > A100 2.04 TB/s
  EXPECT_GT((*target(j["skus"], "H200"))["decode_tok_s"], (*target(j["skus"], "H100 SXM"))["decode_tok_s"]);
  EXPECT_GT((*target(j["skus"], "H100 SXM"))["decode_tok_s"], (*target(j["skus"], "A100 80GB"))["decode_tok_s"]);

  Proc text = run("fit --synthetic llama3.1-8b --skus --no-probe");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("16.06 GB"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("0.85 efficiency"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("RTX 5090"), std::string::npos) << text.out;
}

// A loopback port with nothing listening (bound, then closed: connecting to it is refused).
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(CliFit, OneLineErrors) {
  const std::string refused = "benchmark --serve http://127.0.0.1:" + std::to_string(closed_port()) + " --requests 1";
  struct Case {
    const char* args;
    int code;
    const char* needle;
  };
  for (const Case& c :
       {Case{"fit --ctx 0 --no-probe", 2, "--ctx"}, Case{"fit a b", 2, "unexpected argument 'b'"},
        Case{"fit --synthetic llama3.1-8b --model x", 2, "not both"},
        Case{"fit --synthetic nope --no-probe", 1, "llama3.1-8b"},
        Case{"fit /nonexistent/model --no-probe", 1, "/nonexistent/model"},
        Case{"benchmark --concurrency 2", 2, "--serve only"},
        Case{"benchmark --serve http://127.0.0.1:1 --synthetic x", 2, "does not apply"},
        Case{"benchmark --serve http://127.0.0.1:1 --top-p 0.9", 2, "need --temperature"},
        Case{"benchmark --serve http://127.0.0.1:1 --temperature -1", 2, "--temperature"},
        Case{refused.c_str(), 1, "cannot connect"}}) {
    Proc r = run(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << "\n" << r.err;
  }
}

// `bunsen serve --port 0` in the background; the URL from its "listening on URL" line.
class ServeProcess {
 public:
  ServeProcess() {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::setenv("BUNSEN_CACHE", cache().c_str(), 1);
      const std::string err = cli_test::scratch_dir() + "/serve.err";
      std::freopen(err.c_str(), "w", stderr);
      ::execl(BUNSEN_EXE, BUNSEN_EXE, "serve", "--port", "0", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
    char line[512];
    while (out_ && std::fgets(line, sizeof line, out_)) {
      const std::string l = line;
      if (l.rfind("listening on ", 0) == 0) {
        url_ = l.substr(13, l.find_last_not_of("\r\n") - 12);
        break;
      }
    }
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_) std::fclose(out_);
  }
  const std::string& url() const { return url_; }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  std::string url_;
};

TEST(CliBenchmarkServe, AgainstTheRealServer) {
  ASSERT_EQ(run("fit --no-probe --json").code, 0);  // the demo model exists before the server starts
  ServeProcess server;
  ASSERT_FALSE(server.url().empty()) << "bunsen serve did not print its listening line";
  Proc r = run("benchmark --serve " + server.url() + " --concurrency 3 --requests 6 --prompt-len 40 --gen 8 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["completed"], 6) << r.out;
  EXPECT_EQ(j["failed"], 0) << r.out;
  EXPECT_EQ(j["model"], "demo-qwen3-tiny");
  EXPECT_EQ(j["output_tokens"], 6 * 8);
  EXPECT_EQ(j["prompt_tokens"], 6 * 40);
  for (const char* k : {"ttft_ms", "itl_ms", "e2e_ms"}) {
    EXPECT_GT(j[k]["p50"].get<double>(), 0) << k;
    EXPECT_LE(j[k]["p50"].get<double>(), j[k]["p99"].get<double>()) << k;
  }
  EXPECT_GT(j["output_tok_s"].get<double>(), 0);
  EXPECT_EQ(j["sampling"]["temperature"], 0);

  // Sampled requests (seed = request index): all complete, and the report says how they sampled.
  r = run("benchmark --serve " + server.url() +
          " --concurrency 3 --requests 6 --prompt-len 40 --gen 8 --temperature 0.8 --top-p 0.9 --top-k 40 "
          "--json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json js = json::parse(r.out);
  EXPECT_EQ(js["completed"], 6) << r.out;
  EXPECT_EQ(js["output_tokens"], 6 * 8);
  EXPECT_DOUBLE_EQ(js["sampling"]["temperature"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(js["sampling"]["top_p"].get<double>(), 0.9);
  EXPECT_EQ(js["sampling"]["top_k"], 40);
}

}  // namespace
}  // namespace bunsen
