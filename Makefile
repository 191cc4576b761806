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

# Serves the built-in demo model. The HTTP server arrives with its own issue; until then this runs the
# main job, generation, on the demo model.
serve: build
	./$(BUILD)/bunsen generate --prompt "Hello from bunsen" --max-tokens 32 --seed 1 --temperature 0.8

# Every CPU test (ctest labels unit, kernels, golden, fuzz); CUDA tests skip without a GPU.
test: build
	ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure --timeout 600

clean:
	rm -rf $(BUILD)
