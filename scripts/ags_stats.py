"""Statistics of scripts/ags-steps (imported by its analysis, not run on its own): the mean of a
sample with the half-width of its two-sided 95 % Student's t interval."""
import math

# two-sided 95 % quantiles of Student's t, by degrees of freedom (up to 10: the studies run at
# most 11 seeds)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def stats(xs):
    """(mean, 95 % t half-width or None, n) of a list of numbers; (None, None, 0) when empty,
    no half-width for one value. Errors: KeyError above 11 values (no quantile)."""
    n = len(xs)
    if n == 0:
        return None, None, 0
    mean = sum(xs) / n
    if n < 2:
        return mean, None, n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return mean, T975[n - 1] * sd / math.sqrt(n), n
