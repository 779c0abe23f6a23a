"""Statistics of the studies: the mean of a sample with the half-width of its two-sided 95 %
Student's t interval. The quantile comes from scipy (Debian's python3-scipy), for any number of
degrees of freedom, rounded to three decimals as the published tables print it."""
import math

LEVEL = 0.95


def t975(df):
    """The two-sided 95 % quantile of Student's t with df degrees of freedom (df >= 1), rounded
    to three decimals. Errors: SystemExit naming the package when scipy is missing."""
    try:
        from scipy.stats import t
    except ImportError:
        raise SystemExit("tula: experiments: the t quantiles need python3-scipy (scripts/install-deps)")
    return round(float(t.ppf(0.5 + LEVEL / 2, df)), 3)


def mean_ci(xs):
    """(mean, 95 % t half-width or None, n) of a list of numbers; (None, None, 0) when empty, no
    half-width for one value."""
    n = len(xs)
    if n == 0:
        return None, None, 0
    mean = sum(xs) / n
    if n < 2:
        return mean, None, n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return mean, t975(n - 1) * sd / math.sqrt(n), n
