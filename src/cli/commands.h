// The bunsen verbs. Each returns the process exit code; errors propagate as bunsen::Error to main().
#pragma once

namespace bunsen::cli {

int cmd_generate(int argc, char** argv);
int cmd_benchmark(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_fit(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_convert(int argc, char** argv);

}  // namespace bunsen::cli
