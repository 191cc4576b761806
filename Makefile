# The README's two commands. Both install what is missing (scripts/setup.sh), then build.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup build serve test clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Serves a model over the OpenAI and Anthropic APIs (the built-in demo model unless ARGS names one), e.g.
# `make serve ARGS="--model ~/models/Qwen3-0.6B --port 8081"`.
ARGS ?=
serve: build
	./$(BUILD)/bunsen serve $(ARGS)

# Every CPU test (ctest labels unit, kernels, golden, fuzz); CUDA tests skip without a GPU.
test: build
	ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure --timeout 600

clean:
	rm -rf $(BUILD)
