# Tula: plain GNU make. `make` builds the programs into build/; `make test` builds and runs the
# tests that need no root and no cluster (unit, Python, submission filter); `make check` runs
# every test; `make check-matrix` the Slurm version matrix and the Debian packages (tests/matrix);
# `make demo` runs the main job on a local Slurm cluster; `make eval` the end-to-end evaluation
# (results/eval/report.md). See README.md.
# `make fuzz` builds the libFuzzer targets (clang++) and runs each FUZZ_SECONDS seconds (default 30);
# it is not part of `make check`.
#
#   USE_MPI=auto|yes|no    MPI data parallelism in tula-train (OpenMPI's mpicxx)
#   USE_CUDA=auto|yes|no   CUDA/cuDNN backend of tula-train (CUDA_HOME, default /usr/local/cuda)
#   prefix=/usr/local DESTDIR=   for `make install`
#   JOBS=N                       parallel compile jobs of check, test and demo (default: nproc)
#   TEST_OPT=-O1                 optimization of the test programs' own sources (the code they
#                                test keeps OPT or CXXFLAGS' level)
#   PYTHON=/usr/bin/python3      the Python the tula package is installed for (Debian's)

prefix      ?= /usr/local
bindir      ?= $(prefix)/bin
mandir      ?= $(prefix)/share/man
# The version: one source, the file VERSION (tula --version)
TULA_VERSION := $(shell cat VERSION)
# Slurm: the release whose headers the build uses (a SPANK plugin loads only into the Slurm
# major.minor it was built for); SLURM_INCLUDE names another release's include directory.
SLURM_INCLUDE ?= /usr/include
SLURM_VERSION := $(shell n=$$(sed -n 's/^.define SLURM_VERSION_NUMBER //p' $(SLURM_INCLUDE)/slurm/slurm_version.h 2>/dev/null); \
  [ -n "$$n" ] && printf '%d.%02d.%d' $$((n >> 16 & 255)) $$((n >> 8 & 255)) $$((n & 255)))
slurmplugindir ?= $(shell pkg-config --variable=libdir slurm 2>/dev/null || echo /usr/lib/x86_64-linux-gnu)/slurm-wlm
sysconfdir  ?= /etc/slurm
# where `make install` puts cli_filter.lua: Slurm reads it beside slurm.conf; a package puts it
# under /usr/share/tula and the site links it there (README, Installing from packages)
clifilterdir ?= $(sysconfdir)
# The Python package python/tula goes where Debian's python3 looks for packages of a prefix:
# $(prefix)/lib/python3.X/dist-packages (/usr/local/lib/python3.11/dist-packages on Debian 12).
PYTHON      ?= /usr/bin/python3
PYTHON_MINOR = $(shell $(PYTHON) -c 'import sys; print(sys.version_info[1])' 2>/dev/null || echo 11)
pythondir   ?= $(prefix)/lib/python3.$(PYTHON_MINOR)/dist-packages
USE_MPI     ?= auto
USE_CUDA    ?= auto
CUDA_HOME   ?= /usr/local/cuda

CXX       ?= g++
CC        ?= gcc
MPICXX    ?= mpicxx
OPT       ?= -O2
# After CXXFLAGS on the test programs' own sources (the last -O wins): they check and are not
# timed, and -O1 compiles faster than -O2.
TEST_OPT  ?= -O1
CXXFLAGS  ?= $(OPT) -g
CFLAGS    ?= $(OPT) -g
WARN      := -Wall -Wextra -Wno-unused-parameter
DEPFLAGS   = -MMD -MP
EIGEN_CFLAGS := $(shell pkg-config --cflags eigen3 2>/dev/null || echo -I/usr/include/eigen3)
GSL_LIBS  := -lgsl -lgslcblas -lm

B := build

# ---- optional parts ---------------------------------------------------------------
HAVE_MPI := no
ifneq ($(USE_MPI),no)
  ifneq ($(shell command -v $(MPICXX) 2>/dev/null),)
    HAVE_MPI := yes
  else ifeq ($(USE_MPI),yes)
    $(error tula: USE_MPI=yes but $(MPICXX) was not found; apt-get install libopenmpi-dev)
  endif
endif
HAVE_CUDA := no
ifneq ($(USE_CUDA),no)
  ifneq ($(wildcard $(CUDA_HOME)/bin/nvcc),)
    ifneq ($(wildcard $(CUDA_HOME)/include/cudnn.h)$(wildcard /usr/include/cudnn.h),)
      HAVE_CUDA := yes
    endif
  endif
  ifeq ($(USE_CUDA)$(HAVE_CUDA),yesno)
    $(error tula: USE_CUDA=yes but nvcc and cudnn.h were not found under CUDA_HOME=$(CUDA_HOME))
  endif
endif
# The CUDA backend (trainer/cuda/*.cu, nvcc, sm_90 + PTX) and its test program
# tula-gpu-tests (tests/gpu/*.cpp), which checks each GPU layer against the CPU layers
# (linked as objects) and prints SKIP lines when no device is present. With it, tula-train
# also links the backend (--device cuda; main.cpp and app/ are compiled with TULA_HAVE_CUDA=1) and the
# CUDA libraries, found at run time through an rpath to $(CUDA_HOME)/lib64.
NVCC        ?= $(CUDA_HOME)/bin/nvcc
NVCCFLAGS   ?= -O2
CUDA_ARCH   := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
CUDA_SRC    := $(wildcard trainer/cuda/*.cu)
CUDA_OBJ    := $(CUDA_SRC:%.cu=$(B)/obj/%.o)
GPU_TEST_SRC := $(wildcard tests/gpu/*.cpp)
GPU_TEST_OBJ := $(GPU_TEST_SRC:%.cpp=$(B)/obj/%.o)
# the CPU oracle: every trainer object but main.o (as the unit-test runner links them)
GPU_ORACLE   = $(TRAIN_LIB_OBJ)
CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublas -lcudart
# NCCL (GPU allreduce) when its header is there; else the backend allreduces through MPI.
HAVE_NCCL   := no
ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h)$(wildcard /usr/include/nccl.h),)
  HAVE_NCCL := yes
  CUDA_LIBS += -lnccl
  NCCL_DEFS := -DTULA_HAVE_NCCL=1
endif
GPU_TESTS   :=
ifeq ($(HAVE_CUDA),yes)
  GPU_TESTS := $(B)/bin/tula-gpu-tests
endif
# (the CUDA build rules follow the unit-test runner's rule, below `all`)

ifeq ($(HAVE_MPI),yes)
  TRAIN_CXX   := OMPI_CXX='$(CXX)' $(MPICXX)
  MPI_DEFS    := -DTULA_HAVE_MPI=1
else
  TRAIN_CXX   := $(CXX)
  MPI_DEFS    :=
endif

# OpenMP for the parallel GEMMs of tula-train (trainer/cpu/gemm/*.cpp; --threads)
TRAIN_OMP   := -fopenmp
# The version reaches the code as a macro (tula.h); so does the site configuration directory,
# but only in the two objects that name the default tula.conf (cli/common.o, libtula's conf.o),
# which alone are rebuilt when sysconfdir changes (their own stamp, $(SYSCONF_STAMP)).
SLURM_CFLAGS := $(if $(filter-out /usr/include,$(SLURM_INCLUDE)),-isystem $(SLURM_INCLUDE))
ALL_CXXFLAGS = -std=c++17 $(WARN) $(CXXFLAGS) -fPIC -Ilibtula/include $(EIGEN_CFLAGS) $(SLURM_CFLAGS) \
  -DTULA_VERSION='"$(TULA_VERSION)"' $(DEPFLAGS)
ALL_CFLAGS   = -std=gnu11 $(WARN) $(CFLAGS) -fPIC -Ilibtula/include $(SLURM_CFLAGS) $(DEPFLAGS)

# ---- sources ----------------------------------------------------------------------
LIB_SRC     := $(wildcard libtula/src/*.cpp libtula/src/*/*.cpp)
# names.c: the grammar of user values, pure C, in libtula and in the plugin
NAMES_OBJ   := $(B)/obj/libtula/src/names.o
LIB_OBJ     := $(LIB_SRC:%.cpp=$(B)/obj/%.o) $(NAMES_OBJ)
# tula-train: main.cpp and one folder per part (trainer/cuda is built by nvcc, below)
TRAIN_SRC   := $(wildcard trainer/*.cpp trainer/*/*.cpp trainer/*/*/*.cpp)
TRAIN_OBJ   := $(TRAIN_SRC:%.cpp=$(B)/obj/%.o)
TRAIN_MAIN  := $(B)/obj/trainer/main.o
# trainer/app/: options (unit-tested) and the commands; with CUDA they see the GPU backend
TRAIN_APP_OBJ := $(filter $(B)/obj/trainer/app/%,$(TRAIN_OBJ))
# what the unit tests and the GPU tests link of the trainer: all but main and the commands
TRAIN_LIB_OBJ := $(filter-out $(TRAIN_MAIN) $(TRAIN_APP_OBJ),$(TRAIN_OBJ)) $(B)/obj/trainer/app/options.o
CLI_SRC     := $(wildcard cli/*.cpp)
CLI_OBJ     := $(CLI_SRC:%.cpp=$(B)/obj/%.o)
PLUGIN_CSRC := $(wildcard plugin/*.c)
PLUGIN_XSRC := $(wildcard plugin/*.cpp)
PLUGIN_OBJ  := $(PLUGIN_CSRC:%.c=$(B)/obj/%.o) $(PLUGIN_XSRC:%.cpp=$(B)/obj/%.o) $(NAMES_OBJ)
# plugin objects without the SPANK entry points (pure parts, unit-tested)
PLUGIN_PURE := $(filter-out $(B)/obj/plugin/spank_%.o $(NAMES_OBJ),$(PLUGIN_OBJ))
TEST_SRC    := $(wildcard tests/unit/*.cpp)
TEST_OBJ    := $(TEST_SRC:%.cpp=$(B)/obj/%.o)

LIBTULA_A   := $(B)/lib/libtula.a
TULA        := $(B)/bin/tula
TULA_TRAIN  := $(B)/bin/tula-train
SPANK_SO    := $(B)/lib/tula.so
UNIT_TESTS  := $(B)/bin/tula-unit-tests
BENCH_PLANNER := $(B)/bin/tula-bench-planner
LIBTULA_LIBS := $(LIBTULA_A) -lsqlite3 $(GSL_LIBS)
# The `tula` program links SQLite, GSL and libstdc++ statically when their archives are there
# (Debian's libsqlite3-dev and libgsl-dev ship them); glibc stays shared. cli_filter.lua starts
# `tula plan` at every `sbatch --tula` submission, and loading those shared libraries was about
# 3 ms of its 9 ms of CPU time there (bench/bench-submit-latency). STATIC_TULA=no links them
# as shared libraries (then a security update of libsqlite3 reaches tula without a rebuild);
# STATIC_TULA=yes fails when an archive is missing; auto (default) falls back to shared.
STATIC_TULA ?= auto
# `tula` alone links libslurm (cli/slurm_query.cpp asks slurmctld for partition limits and
# expected start times); libtula, the plugin and tula-train do not.
TULA_LIBS := $(LIBTULA_LIBS) -lslurm
ifneq ($(STATIC_TULA),no)
  TULA_STATIC_MISSING := $(strip $(foreach a,libsqlite3.a libgsl.a libgslcblas.a,\
    $(if $(filter /%,$(shell $(CXX) -print-file-name=$(a))),,$(a))))
  ifeq ($(TULA_STATIC_MISSING),)
    TULA_LIBS := $(LIBTULA_A) -Wl,-Bstatic -lsqlite3 -lgsl -lgslcblas -Wl,-Bdynamic -lslurm -lm -static-libstdc++ -static-libgcc
  else ifeq ($(STATIC_TULA),yes)
    $(error tula: STATIC_TULA=yes but $(TULA_STATIC_MISSING) not found; apt-get install libsqlite3-dev libgsl-dev)
  endif
endif

# Rebuild when the build settings change (as Redis's .make-settings): the compilers, their
# flags and the optional parts are written to $(SETTINGS) whenever they differ from what is
# there, and every object depends on it.
SETTINGS     := $(B)/.make-settings
SETTINGS_NOW := CXX=$(CXX) CC=$(CC) MPICXX=$(MPICXX) NVCC=$(NVCC) OPT=$(OPT) TEST_OPT=$(TEST_OPT) CXXFLAGS=$(CXXFLAGS) \
  CFLAGS=$(CFLAGS) NVCCFLAGS=$(NVCCFLAGS) HAVE_MPI=$(HAVE_MPI) HAVE_CUDA=$(HAVE_CUDA) \
  HAVE_NCCL=$(HAVE_NCCL) CUDA_HOME=$(CUDA_HOME) STATIC_TULA=$(STATIC_TULA) VERSION=$(TULA_VERSION) \
  SLURM_VERSION=$(SLURM_VERSION)
ifneq ($(strip $(SETTINGS_NOW)),$(strip $(shell cat $(SETTINGS) 2>/dev/null)))
  $(shell mkdir -p $(B) && printf '%s\n' '$(strip $(SETTINGS_NOW))' > $(SETTINGS))
endif
SYSCONF_STAMP := $(B)/.make-sysconfdir
ifneq ($(sysconfdir),$(shell cat $(SYSCONF_STAMP) 2>/dev/null))
  $(shell mkdir -p $(B) && printf '%s\n' '$(sysconfdir)' > $(SYSCONF_STAMP))
endif
SYSCONF_OBJ := $(B)/obj/cli/common.o $(B)/obj/libtula/src/conf.o
$(SYSCONF_OBJ): $(SYSCONF_STAMP)
$(SYSCONF_OBJ): ALL_CXXFLAGS += -DTULA_SYSCONFDIR='"$(sysconfdir)"'
# The fit cache's key covers the code that fits (tula/fit_cache.hpp): a checksum of these
# sources reaches its object, which is rebuilt when they change.
FIT_CODE := libtula/src/models/step_fit.cpp libtula/include/tula/step_fit.hpp libtula/src/models/overlap.cpp \
  libtula/src/cache/fit_cache.cpp
$(B)/obj/libtula/src/cache/fit_cache.o: $(FIT_CODE)
$(B)/obj/libtula/src/cache/fit_cache.o: ALL_CXXFLAGS += -DTULA_FIT_CODE='"$(firstword $(shell cat $(FIT_CODE) | cksum))"'

# `make` with no goal builds everything (the rule above would otherwise be the default goal)
.DEFAULT_GOAL := all
# check-matrix and uninstall too
.PHONY: all tests test deps-report check check-matrix unit uninstall integration demo demo-pytorch demo-first-run eval testbed-report ranks-report first-run-report first-job-report ags-report clean install bench fuzz
# `make` builds the programs; the test programs build with the tests (`tests`), the benchmark
# with `make bench`.
all: deps-report $(TULA) $(TULA_TRAIN) $(SPANK_SO)

deps-report:
	@scripts/deps-report "$(HAVE_MPI)" "$(HAVE_CUDA)" "$(SLURM_VERSION)"

$(B)/obj/trainer/%.o: trainer/%.cpp $(SETTINGS)
	@mkdir -p $(@D)
	$(TRAIN_CXX) $(ALL_CXXFLAGS) $(MPI_DEFS) -Itrainer -c $< -o $@
$(patsubst %.cpp,$(B)/obj/%.o,$(wildcard trainer/cpu/gemm/*.cpp)): ALL_CXXFLAGS += $(TRAIN_OMP)
$(B)/obj/tests/%.o: tests/%.cpp $(SETTINGS)
	@mkdir -p $(@D)
	$(TRAIN_CXX) $(ALL_CXXFLAGS) $(TEST_OPT) $(MPI_DEFS) -I. -Itrainer -Iplugin -c $< -o $@
$(B)/obj/libtula/%.o: libtula/%.cpp $(SETTINGS)
	@mkdir -p $(@D)
	$(CXX) $(ALL_CXXFLAGS) -Ilibtula/src -c $< -o $@
$(B)/obj/%.o: %.cpp $(SETTINGS)
	@mkdir -p $(@D)
	$(CXX) $(ALL_CXXFLAGS) -c $< -o $@
$(B)/obj/%.o: %.c $(SETTINGS)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIBTULA_A): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^
$(TULA): $(CLI_OBJ) $(LIBTULA_A)
	@mkdir -p $(@D)
	$(CXX) -o $@ $(CLI_OBJ) $(TULA_LIBS)
ifeq ($(HAVE_CUDA),yes)
TRAIN_GPU_OBJ  = $(CUDA_OBJ)
TRAIN_GPU_LIBS = $(CUDA_LIBS)
$(TRAIN_MAIN) $(TRAIN_APP_OBJ): ALL_CXXFLAGS += -DTULA_HAVE_CUDA=1 -isystem $(CUDA_HOME)/include -Itrainer/cuda
endif
# tula-train takes from libtula.a only what needs neither SQLite nor GSL (its runs and profiles
# reach a database through `tula db record`): linking it without them checks that.
$(TULA_TRAIN): $(TRAIN_OBJ) $(TRAIN_GPU_OBJ) $(LIBTULA_A)
	@mkdir -p $(@D)
	$(TRAIN_CXX) $(TRAIN_OMP) -o $@ $(TRAIN_OBJ) $(TRAIN_GPU_OBJ) $(LIBTULA_A) $(TRAIN_GPU_LIBS) -lz -lpthread
# The SPANK plugin: C and libc only (no libtula, SQLite, GSL or C++ runtime: it plans nothing),
# built hardened (stack protector, fortify, full RELRO, immediate binding, no executable stack,
# NDEBUG). No -lslurm: its Slurm symbols come from the host process (sbatch, slurmstepd); only
# plugin_* and slurm_spank_* are exported (plugin/tula.map). $(PLUGIN_LINKCHECK), built by
# `make check`, links the same objects with -z defs against libslurm: any symbol that is
# neither libc's nor Slurm's fails the build (the spank_* calls are defined in libslurmfull,
# which sbatch and slurmstepd link; libslurm's public API lacks them).
HARDEN_CFLAGS  := -fstack-protector-strong -D_FORTIFY_SOURCE=2 -DNDEBUG -fno-strict-overflow
HARDEN_LDFLAGS := -Wl,-z,relro,-z,now -Wl,-z,noexecstack
PLUGIN_LINKCHECK := $(B)/lib/tula-linkcheck.so
comma          := ,
SLURM_FULL     := $(wildcard $(slurmplugindir)/libslurmfull.so)
SLURM_LINK     := $(if $(SLURM_FULL),$(SLURM_FULL) -Wl$(comma)-rpath$(comma)$(slurmplugindir),-lslurm)
$(PLUGIN_OBJ): ALL_CFLAGS += $(HARDEN_CFLAGS)
$(SPANK_SO): $(PLUGIN_OBJ) plugin/tula.map
	@mkdir -p $(@D)
	$(CC) -shared -fPIC $(HARDEN_LDFLAGS) -Wl,--version-script=plugin/tula.map -o $@ $(PLUGIN_OBJ)
$(PLUGIN_LINKCHECK): $(PLUGIN_OBJ) plugin/tula.map
	@mkdir -p $(@D)
	$(CC) -shared -fPIC $(HARDEN_LDFLAGS) -Wl,-z,defs -Wl,--version-script=plugin/tula.map -o $@ $(PLUGIN_OBJ) \
	  $(SLURM_LINK)
# The metrics-file commands (tula db record, tula profile compute --command) are unit-tested
# through their plain functions (cli/metrics_commands.hpp), with what they link of the CLI; so
# are the submission filter's decisions (cli/submit.hpp).
UNIT_CLI_CMDS := $(addprefix $(B)/obj/cli/,db_record.o profile_command.o profile_jobs.o common.o process.o submit.o)
# cli/format.o, cli/text.o and cli/slurm_reply.o: the CLI's pure reports, text helpers and
# slurmctld reply protocol are unit-tested too.
UNIT_LINK   := $(TEST_OBJ) $(TRAIN_LIB_OBJ) $(PLUGIN_PURE) $(B)/obj/cli/format.o $(B)/obj/cli/text.o \
  $(B)/obj/cli/slurm_reply.o $(UNIT_CLI_CMDS)
# bench/: planner latency and fit benchmark (bench/bench-planner and bench/bench-fit run it).
$(BENCH_PLANNER): $(B)/obj/bench/bench-planner.o $(LIBTULA_A)
	@mkdir -p $(@D)
	$(CXX) -o $@ $< $(LIBTULA_LIBS)
$(UNIT_TESTS): $(UNIT_LINK) $(LIBTULA_A)
	@mkdir -p $(@D)
	$(TRAIN_CXX) $(TRAIN_OMP) -o $@ $(UNIT_LINK) \
	  $(LIBTULA_LIBS) -lcppunit -lz -lpthread
# CUDA backend (only when HAVE_CUDA=yes): nvcc for trainer/cuda/*.cu; tula-gpu-tests links the
# CPU layers as the oracle and the CUDA libraries with an rpath.
ifeq ($(HAVE_CUDA),yes)
$(B)/obj/trainer/cuda/%.o: trainer/cuda/%.cu $(SETTINGS)
	@mkdir -p $(@D)
	$(NVCC) -std=c++17 $(NVCCFLAGS) $(CUDA_ARCH) -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter \
	  $(NCCL_DEFS) -Ilibtula/include -Itrainer -Itrainer/cuda -MMD -MP -MF $(@:.o=.d) -c $< -o $@
$(GPU_TEST_OBJ): ALL_CXXFLAGS += -isystem $(CUDA_HOME)/include -Itrainer/cuda $(NCCL_DEFS)
$(B)/bin/tula-gpu-tests: $(GPU_TEST_OBJ) $(CUDA_OBJ) $(GPU_ORACLE) $(LIBTULA_A)
	@mkdir -p $(@D)
	$(TRAIN_CXX) $(TRAIN_OMP) -o $@ $(GPU_TEST_OBJ) $(CUDA_OBJ) $(GPU_ORACLE) $(LIBTULA_LIBS) $(CUDA_LIBS) -lz -lpthread
endif

# The test programs: the unit tests, the GPU tests (with CUDA), the plugin's link check.
tests: all $(UNIT_TESTS) $(GPU_TESTS) $(PLUGIN_LINKCHECK)

# Parallel compile jobs of the goals below that build first (a -j given to make wins).
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
SUBMAKE = $(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS))

check:
	@scripts/install-deps
	@$(SUBMAKE) tests
	@B=$(B) tests/run

# The Slurm version matrix (tests/matrix): the same tests against Slurm 24.11 (Debian 13) and
# 26.05 (Debian unstable), each in a root file system of its release (scripts/tula-rootfs).
check-matrix:
	@scripts/install-deps --matrix
	@tests/matrix

# The tier without root or a cluster: unit tests, Python tests and the submission filter's
# tests (tests/run --tier fast).
test:
	@$(SUBMAKE) tests
	@B=$(B) tests/run --tier fast

unit: $(UNIT_TESTS)
	@$(UNIT_TESTS)

# TULA_INSTALLED=yes: the demo of the Tula installed from packages, with no build (scripts/demo).
demo:
ifeq ($(TULA_INSTALLED),yes)
	@TULA_INSTALLED=yes scripts/demo
else
	@scripts/install-deps
	@$(SUBMAKE) all
	@TULA_BUILD_DIR=$(B) scripts/demo
endif

# The PyTorch example end to end (scripts/demo-pytorch): profile, plan, sbatch --tula=auto, the
# run recorded from its metrics file, and a second plan that uses it. Needs python3-torch.
demo-pytorch:
	@scripts/install-deps --torch
	@$(SUBMAKE) all
	@TULA_BUILD_DIR=$(B) scripts/demo-pytorch

# A workload nobody profiled: the first job measures itself, the second is planned
# (scripts/demo-first-run).
demo-first-run:
	@scripts/install-deps
	@$(SUBMAKE) all
	@TULA_BUILD_DIR=$(B) scripts/demo-first-run

# The end-to-end evaluation: Tula vs large batch vs small batch on the local cluster
# (experiments/eval.py; EVAL_MODELS, EVAL_EPOCHS, EVAL_LIMIT_TRAIN): a row per job in
# results/eval/runs.jsonl (with manifest.json), and the report written from them beside the rows,
# results/eval/report.md and results/eval/eval-*.png; its --from-rows writes the report alone.
eval:
	@scripts/install-deps
	@$(SUBMAKE) all
	@TULA_BUILD_DIR=$(B) $(PYTHON) -B -m experiments.eval

# What the isolated testbed does to communication and to Tula's choices: allreduce against the
# shaped link and the fitted model, the knee at three link rates (experiments/testbed_report.py);
# its rows go to results/testbed-report, the report written from them beside them (report.md).
# ranks-report (jobs of 2 ranks a node, experiments/ranks_report.py) and first-run-report (the first
# prediction repeated, experiments/first_run_report.py) and first-job-report (a workload nobody profiled:
# the first job measures itself, the second is planned, experiments/first_job_report.py) likewise: rows and
# report.md in results/NAME.
# Each module's --from-rows writes its report from the rows alone, without a cluster.
testbed-report:
	@$(SUBMAKE) all
	@TULA_BUILD_DIR=$(B) $(PYTHON) -B -m experiments.testbed_report

ranks-report:
	@$(SUBMAKE) all
	@TULA_BUILD_DIR=$(B) $(PYTHON) -B -m experiments.ranks_report

first-run-report:
	@$(SUBMAKE) all
	@TULA_BUILD_DIR=$(B) $(PYTHON) -B -m experiments.first_run_report

first-job-report:
	@$(SUBMAKE) all
	@TULA_BUILD_DIR=$(B) $(PYTHON) -B -m experiments.first_job_report

# The large-batch studies' reports, each written beside its rows (no training):
# results/ags-study/lenet5/report.md (CPU), results/ags-study/fmnist-cnn/report.md (GPU; the baselines above
# batch 64 on the CPU) and results/ags-steps/lenet5/report.md (steps to the target with WSD branches at the
# lenet5 study's choices); results/local-sgd/report.md (Local SGD's batch test). The runs themselves are
# `python3 -m experiments.ags_study_run` and `python3 -m experiments.ags_steps_run` with the options of the
# results folder's manifest.json.
ags-report:
	@for s in ags-study/lenet5 ags-study/fmnist-cnn; do \
	    $(PYTHON) -B -m experiments.ags_report --results results/$$s --out results/$$s/report.md || exit 1; done
	@$(PYTHON) -B -m experiments.ags_steps_report --results results/ags-steps/lenet5 --out results/ags-steps/lenet5/report.md
	@$(PYTHON) -B -m experiments.local_sgd_report --results results/local-sgd --out results/local-sgd/report.md

bench: all $(BENCH_PLANNER)
	@B=$(B) bench/run

# ---- fuzzing: libFuzzer targets of tests/fuzz/ (clang++ -fsanitize=fuzzer,address), libtula
# rebuilt with ASan under $(B)/fuzz. Each target runs FUZZ_SECONDS seconds from its seed corpus
# tests/fuzz/corpus/<target>/ (read only: new inputs go to $(B)/fuzz/corpus/<target>/, crashes to
# $(B)/fuzz/<target>-crash-*). Not part of `make check`.
FUZZ_CXX     ?= clang++
FUZZ_SECONDS ?= 30
FUZZ_TARGETS := conf import hardware db
FUZZ_CXXFLAGS = -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address \
  -Ilibtula/include -Ilibtula/src $(EIGEN_CFLAGS) -MMD -MP
FUZZ_LIB_OBJ := $(LIB_SRC:%.cpp=$(B)/fuzz/obj/%.o) $(B)/fuzz/obj/libtula/src/names.o
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(B)/fuzz/fuzz_%)
.PRECIOUS: $(B)/fuzz/obj/%.o
$(B)/fuzz/obj/%.o: %.cpp $(SETTINGS)
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -c $< -o $@
$(B)/fuzz/obj/%.o: %.c $(SETTINGS)
	@mkdir -p $(@D)
	clang -std=gnu11 -O1 -g -fsanitize=fuzzer-no-link,address -Ilibtula/include -c $< -o $@
$(B)/fuzz/fuzz_%: $(B)/fuzz/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB_OBJ)
	$(FUZZ_CXX) -fsanitize=fuzzer,address -o $@ $^ -lsqlite3 $(GSL_LIBS)
fuzz: $(FUZZ_BINS)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(B)/fuzz/corpus/$$t; \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s (seeds tests/fuzz/corpus/$$t, log $(B)/fuzz/$$t.log)"; \
	  rc=0; $(B)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
	    -artifact_prefix=$(B)/fuzz/$$t- $(B)/fuzz/corpus/$$t tests/fuzz/corpus/$$t >$(B)/fuzz/$$t.log 2>&1 || rc=$$?; \
	  grep -E '^(stat::number_of_executed_units|stat::new_units_added|SUMMARY|Test unit written|==[0-9]+==ERROR)' \
	    $(B)/fuzz/$$t.log || true; \
	  if [ $$rc != 0 ]; then echo "fuzz: $$t FAILED (exit $$rc; see $(B)/fuzz/$$t.log and $(B)/fuzz/$$t-*)"; exit 1; fi; \
	done; echo "fuzz: all targets ran $(FUZZ_SECONDS) s without a crash"

install: all
	install -d $(DESTDIR)$(bindir) \
	  $(DESTDIR)$(slurmplugindir) $(DESTDIR)$(sysconfdir)/plugstack.conf.d $(DESTDIR)$(clifilterdir) \
	  $(DESTDIR)$(mandir)/man1 $(DESTDIR)$(mandir)/man5 $(DESTDIR)$(mandir)/man7 \
	  $(DESTDIR)$(mandir)/man8
	install -m 755 $(TULA) $(TULA_TRAIN) $(DESTDIR)$(bindir)/
	install -m 755 $(SPANK_SO) $(DESTDIR)$(slurmplugindir)/tula.so
	sed -e 's|@PLUGINDIR@|$(slurmplugindir)|g' -e 's|@SYSCONFDIR@|$(sysconfdir)|g' \
	  etc/plugstack.conf.d/tula.conf > $(DESTDIR)$(sysconfdir)/plugstack.conf.d/tula.conf
	sed -e 's|@TULA_BIN@|$(bindir)/tula|g' \
	  etc/cli_filter.lua > $(DESTDIR)$(clifilterdir)/cli_filter.lua
	test -e $(DESTDIR)$(sysconfdir)/tula.conf || install -m 644 etc/tula.conf $(DESTDIR)$(sysconfdir)/tula.conf
	for s in 1 5 7 8; do for f in man/man$$s/*.$$s; do [ -e "$$f" ] && install -m 644 $$f $(DESTDIR)$(mandir)/man$$s/; done; done; true
	install -d $(DESTDIR)$(pythondir)/tula
	install -m 644 python/tula/*.py $(DESTDIR)$(pythondir)/tula/

# Removes what `make install` put (same prefix, sysconfdir and DESTDIR); tula.conf only when it
# is still the example's copy (a site's edited tula.conf stays).
uninstall:
	rm -f $(DESTDIR)$(bindir)/tula $(DESTDIR)$(bindir)/tula-train $(DESTDIR)$(slurmplugindir)/tula.so \
	  $(DESTDIR)$(sysconfdir)/plugstack.conf.d/tula.conf $(DESTDIR)$(clifilterdir)/cli_filter.lua
	for s in 1 5 7 8; do for f in man/man$$s/*.$$s; do rm -f $(DESTDIR)$(mandir)/man$$s/$${f##*/}; done; done
	rm -rf $(DESTDIR)$(pythondir)/tula
	if cmp -s etc/tula.conf $(DESTDIR)$(sysconfdir)/tula.conf; then rm -f $(DESTDIR)$(sysconfdir)/tula.conf; \
	  else test ! -e $(DESTDIR)$(sysconfdir)/tula.conf || echo "tula: kept $(DESTDIR)$(sysconfdir)/tula.conf (changed since make install)"; fi

clean:
	rm -rf $(B)

-include $(shell find $(B)/obj $(B)/fuzz/obj -name '*.d' 2>/dev/null)
