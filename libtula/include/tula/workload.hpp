// libtula: what a job trains (the workload) and how to find it in a batch script.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

namespace tula {

/// What a trainer does with the last partial batch of an epoch (D examples at global batch B
/// when B does not divide D).
enum class LastBatch {
    Drop,  ///< left out: floor(D / B) steps (tula-train)
    Keep,  ///< trained as a smaller step: ceil(D / B) steps (PyTorch's DataLoader default,
           ///< drop_last=False; the MLPerf ResNet-50 reference's epoch size)
};

/// Optimizer steps in one epoch of `examples` (D) at global batch B (examples per step):
/// floor(D / B) for LastBatch::Drop, ceil(D / B) for LastBatch::Keep. The one place the
/// planner, the predictions and the calibrations count steps. 0 when D or B is not > 0.
/// Errors: none (pure).
double steps_per_epoch(double examples, double global_batch, LastBatch last);

/// "drop" or "keep" (JSON and kv output, hardware files). Pure.
const char* last_batch_name(LastBatch last);

/// Examples per rank in one forward pass of tula-train's evaluation of the test set after
/// each epoch (TrainConfig::eval_batch), and a hardware file's default (workload.eval_batch).
constexpr int kTrainerEvalBatch = 500;

/// A training workload: a model on a dataset. `name` is "<model>@<dataset>",
/// for example "lenet5@fashion-mnist".
struct Workload {
    std::string name;
    std::string model;
    std::string dataset;
    int64_t params = 0;          ///< trainable parameters (count); gradient bytes = 4 * params (float32)
    int64_t train_examples = 0;  ///< examples in one training epoch
    int64_t test_examples = 0;   ///< examples in the test set
    /// Floats of activations one training example produces in the forward pass (the input
    /// and every layer's output, composites' inner outputs included), written by tula-train
    /// from its model's layer shapes; 0: not known (memory is then not modelled).
    int64_t activation_floats = 0;
    /// How its trainer forms an epoch's steps: Drop for tula-train (profiled workloads), a
    /// hardware file's workload.last_batch otherwise.
    LastBatch last_batch = LastBatch::Drop;
    /// Examples per rank in one forward pass of the evaluation of the test set that follows
    /// each epoch (Predictor::evaluation_seconds): kTrainerEvalBatch, or a hardware file's
    /// workload.eval_batch.
    int eval_batch = kTrainerEvalBatch;
};

/// "<model>@<dataset>". Pure.
std::string workload_name(const std::string& model, const std::string& dataset);

/// The examples one epoch of a job uses, as tula-train's --limit-train, --limit-test and
/// --val-split give them (counts of examples; 0: the option is absent). The one rule of what
/// an epoch trains on and evaluates: the planner and `tula predict` use these methods.
struct EpochExamples {
    int64_t train = 0;       ///< --limit-train N: the first N training examples (0: all)
    int64_t test = 0;        ///< --limit-test N: the first N test examples (0: all)
    int64_t validation = 0;  ///< --val-split N: the last N of those training examples, held out
    /// The training set the limit leaves: min(train, W) when train > 0, else W (W =
    /// w.train_examples). Pure.
    int64_t limited_train(const Workload& w) const {
        return train > 0 ? std::min(train, w.train_examples) : w.train_examples;
    }
    /// Examples trained per epoch: limited_train(w) less the validation split, at least 0. Pure.
    int64_t trained(const Workload& w) const { return std::max<int64_t>(0, limited_train(w) - held_out(w)); }
    /// Validation examples evaluated after each epoch: min(validation, limited_train(w)), at
    /// least 0. Pure.
    int64_t held_out(const Workload& w) const {
        return std::max<int64_t>(0, std::min(validation, limited_train(w)));
    }
    /// Test examples evaluated after each epoch: min(test, T) when test > 0, else T (T =
    /// w.test_examples, at least 0). Pure.
    int64_t tested(const Workload& w) const {
        const int64_t t = std::max<int64_t>(0, w.test_examples);
        return test > 0 ? std::min(test, t) : t;
    }
};

/// What a batch script's tula-train command line says.
/// tula-train's global batch when neither --batch-size nor TULA_BATCH_SIZE gives one
/// (examples per step): the reference batch of a script without --batch-size.
constexpr int kTrainerDefaultBatch = 64;

struct TrainCommand {
    bool found = false;     ///< a `tula-train` invocation with --model was seen
    std::string model;      ///< --model value
    std::string dataset;    ///< --data value ("fashion-mnist" when absent)
    int epochs = 0;         ///< --epochs value, 0 when absent
    int batch_size = 0;     ///< --batch-size value, 0 when absent
    /// --limit-train value: tula-train trains on the first N training examples of each epoch.
    /// 0 when absent, 0 (tula-train's "all") or not a plain decimal count in [1, 10^8].
    int limit_train = 0;
    /// --limit-test value (the first N test examples are evaluated) and --val-split value (the
    /// last N training examples are held out and evaluated), read as limit_train is.
    int limit_test = 0;
    int val_split = 0;
    /// --threads value: the CPUs one rank computes on (the submission asks Slurm for as many
    /// per task); 0 when absent or not a plain decimal count, read as limit_train is.
    int threads = 0;
    /// --optimizer value, or the directive's optimizer=NAME; "" when absent. The convergence
    /// fit uses the runs of this optimizer ("auto": the fit picks, as for "").
    std::string optimizer;
    /// The workload, epochs, batch or training examples came from a `# tula:` directive line.
    bool from_directive = false;
    /// Why a `# tula:` directive could not be read (found is then false), else "".
    std::string problem;
    std::string workload() const { return workload_name(model, dataset); }
    /// The global batch at which the script's --epochs define its accuracy target: its
    /// --batch-size, else tula-train's default (kTrainerDefaultBatch), examples per step.
    int reference_batch() const { return batch_size > 0 ? batch_size : kTrainerDefaultBatch; }
    /// The examples of the line's epochs: --limit-train, --limit-test and --val-split.
    EpochExamples epoch_examples() const { return EpochExamples{limit_train, limit_test, val_split}; }
};

/// Finds the first line of a batch script that runs `tula-train` (directly, through a
/// path, or after `mpirun ...`) and reads --model, --data, --epochs, --batch-size,
/// --limit-train, --limit-test, --val-split, --threads and --optimizer from it, in both `--flag value` and `--flag=value` forms; `\` line
/// continuations are joined. Any trainer (PyTorch, ...) names its workload with the first
/// directive comment line `# tula: workload=MODEL@DATASET epochs=N batch=B limit_train=M
/// optimizer=NAME` (only workload required; tula-jobs(7)); the directive's values override the tula-train
/// line's. Other `#` comment lines are ignored. Pure; never throws; found=false when there is
/// neither, or a value is malformed; a malformed directive also sets `problem`. Reads at most the first 1 MiB of `script`, in
/// one pass: time linear in the bytes read (about 10 ms for 1 MiB of any content).
TrainCommand parse_train_command(const std::string& script);

}  // namespace tula
