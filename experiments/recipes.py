"""The large-batch studies' training recipes, defined once: each method's tula-train options at a
learning-rate multiplier m (its base --lr at --lr-base-batch 64, times m, and the options that
scale with m), and the report's sentence about them, written from the same table."""

# Every method's base --lr at multiplier 1, unless its recipe names another.
BASE_LR = 0.05


class Scaled:
    """An option value that is its factor times the run's multiplier m."""

    def __init__(self, factor):
        self.factor = factor

    def at(self, mult):
        return "%.10g" % (self.factor * mult)

    def __str__(self):
        return "%g*m" % self.factor


class Recipe:
    """A method's options (besides --lr and --schedule: a tuple of words and Scaled values), its
    base --lr and what the report says of it (None: nothing beyond the options)."""

    def __init__(self, options, base_lr=BASE_LR, why=None):
        self.options = tuple(options)
        self.base_lr = base_lr
        self.why = why

    def args(self, mult):
        return [w.at(mult) if isinstance(w, Scaled) else w for w in self.options]

    def text(self):
        return " ".join(str(w) for w in self.options)


# The study's methods, in the order the report names them.
RECIPES = {
    "sgd": Recipe(("--optimizer", "sgd", "--lr-scaling", "linear", "--lr-max", Scaled(0.4)),
                  why="linear scaling with the trainer's gradual warmup, the rate capped at 0.4*m"),
    "lars": Recipe(("--optimizer", "lars")),
    "lamb": Recipe(("--optimizer", "lamb", "--lr-scaling", "sqrt"), base_lr=0.01, why="square-root scaling"),
    "ags": Recipe(("--optimizer", "ags")),
    "ags-sqrt": Recipe(("--optimizer", "ags", "--ags-rate-rule", "sqrt")),
    "ags-first": Recipe(("--optimizer", "ags", "--ags-rate-rule", "first")),
}
METHODS = tuple(RECIPES)
# The weak baseline, run beside ags: SGD with linear scaling and no cap at multiplier 1, cosine.
WEAK = "linear"
WEAK_RECIPE = Recipe(("--optimizer", "sgd", "--lr-scaling", "linear", "--lr-max", "0"))


def recipe(method):
    """The Recipe of a method or of the weak baseline. Errors: KeyError."""
    return WEAK_RECIPE if method == WEAK else RECIPES[method]


def lr(method, mult):
    """The method's --lr at multiplier mult, as the command line spells it."""
    return "%.10g" % (recipe(method).base_lr * mult)


def train_args(method, mult):
    """The method's tula-train options at multiplier mult: its recipe, then --lr."""
    return recipe(method).args(mult) + ["--lr", lr(method, mult)]


def _plain(method):
    """The method's recipe is `--optimizer METHOD` alone."""
    return RECIPES[method].options == ("--optimizer", method)


def base_lr_text():
    """The base rates, as the report's grid line gives them: "0.01 for lamb, 0.05 otherwise"."""
    other = [m for m in METHODS if RECIPES[m].base_lr != BASE_LR]
    return ", ".join("%g for %s" % (RECIPES[m].base_lr, m) for m in other) + ", %g otherwise" % BASE_LR


def recipes_text():
    """The report's sentence about the recipes at multiplier m (without its leading "- "): one
    clause per method, the methods whose recipe is `--optimizer METHOD` alone in one clause at the
    place of the first of them."""
    clauses, plain_done = [], False
    for m in METHODS:
        r = RECIPES[m]
        if _plain(m):
            if not plain_done:
                clauses.append("%s `--optimizer NAME`" % ", ".join(x for x in METHODS if _plain(x)))
                plain_done = True
            continue
        clauses.append("%s `%s`%s" % (m, r.text(), " (%s)" % r.why if r.why else ""))
    return "recipes at multiplier m: %s; the trainer's defaults otherwise" % "; ".join(clauses)


def weak_text():
    """The weak baseline's options, as the report names them."""
    return WEAK_RECIPE.text()
