# scripts/ags-recipes.sh: the tuned large-batch study's recipes, sourced by scripts/ags-study
# and scripts/ags-steps (not run on its own). A method's tula-train options at learning-rate
# multiplier m are `recipe METHOD m` plus `--lr $(base_lr METHOD) x m`. The analysis of
# scripts/ags-study is experiments/ags_report.py, that of scripts/ags-steps experiments/ags_steps_report.py.

# the study's methods (the weak baseline "linear" aside); known_method M: M is one of them
methods_known="sgd lars lamb ags ags-sqrt ags-first"
known_method() { [[ " $methods_known " == *" $1 "* ]]; }
# base_lr METHOD: the method's --lr at multiplier 1 (for --lr-base-batch 64)
base_lr() { case "$1" in lamb) echo 0.01 ;; *) echo 0.05 ;; esac; }
# recipe METHOD MULT: the method's tula-train options (besides --lr and --schedule); "linear" is
# the weak baseline
recipe() {
    case "$1" in
        sgd) echo "--optimizer sgd --lr-scaling linear --lr-max $(awk -v x="$2" 'BEGIN { printf "%.10g", 0.4 * x }')" ;;
        linear) echo "--optimizer sgd --lr-scaling linear --lr-max 0" ;;
        lamb) echo "--optimizer lamb --lr-scaling sqrt" ;;
        ags-sqrt) echo "--optimizer ags --ags-rate-rule sqrt" ;;
        ags-first) echo "--optimizer ags --ags-rate-rule first" ;;
        *) echo "--optimizer $1" ;;
    esac
}
