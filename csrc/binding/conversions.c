/*
 * conversions.c -- numbers in and out: seconds to nanoseconds (the deadline
 * rule), the time range and its errors, nanoseconds to seconds
 * (pw__s_of_ns), and the lateness histogram's quantiles (stats()).
 *
 * Owns: nothing shared; pure functions of their arguments (and of a core's
 * histogram, read under its mutex by the caller).  Must not touch: a core's
 * wheel, a handle.  Module-wide rules: module.h.
 */
#include "module.h"

/*
 * Nanoseconds to seconds, the one formula behind time(), when(),
 * next_when() and next_deadline(): the float nearest to ns / 10**9, as
 * Python's own `ns / 10**9` (and round(x, 9), which the virtual loop uses)
 * gives it, and time.monotonic() for any count below 2**53 ns (104 days).
 * It is monotonic and exact on whole seconds, which the deadline rule
 * (time_rule) relies on.  Below 2**53 one division is exact rounding;
 * above, q + r/1e9 is within one ulp, and the distance to the neighbours
 * decides in integers: y >= 2**23 there, so y, its neighbours and q differ
 * by exact multiples of 2**-30, and no such count lies on a midpoint.
 */
double pw__s_of_ns(int64_t ns) {
  const int64_t exact = (int64_t)1 << 53;
  if (ns >= -exact && ns <= exact)
    return (double)ns / 1e9;
  uint64_t u = ns < 0 ? -(uint64_t)ns : (uint64_t)ns;
  uint64_t q = u / 1000000000u, r = u % 1000000000u;
  double fq = (double)q, y = fq + (double)r / 1e9;
  int64_t twice_r = (int64_t)r << 31; /* 2 * r, in units of 2**-30 */
  for (int i = 0; i < 2; i++) {
    double hi = nextafter(y, INFINITY), lo = nextafter(y, -INFINITY);
    int64_t yy = (int64_t)ldexp(y - fq, 30);
    if (((int64_t)ldexp(hi - fq, 30) + yy) * 1000000000 < twice_r)
      y = hi; /* ns / 1e9 lies above the midpoint to hi */
    else if (((int64_t)ldexp(lo - fq, 30) + yy) * 1000000000 > twice_r)
      y = lo;
    else
      break;
  }
  return ns < 0 ? -y : y;
}

/* ------------------------------------------------------------------ */
/* conversions                                                         */

/*
 * The clock's range.  Every time and deadline is an int64 count of
 * nanoseconds: about +-292 years (+-9223372036.85 s) around the clock's zero,
 * the boot for time.monotonic().  inf and -inf stand for "never" and "the
 * past"; a finite value outside the range is refused with OverflowError, as
 * CPython's own time.sleep() and Event.wait() refuse theirs, rather than
 * quietly becoming "never" (a deadline 300 years away is a bug in the
 * caller more often than a wish).  Ints and floats agree on the boundary:
 * an integral number of seconds is in range iff |s| <= 9223372036.
 */
static int out_of_range(const char *what) {
  PyErr_Format(PyExc_OverflowError,
               "%s is beyond the clock's range (|t| < 2**63 ns, about 9223372036.85 seconds; "
               "use math.inf for never)",
               what);
  return -1;
}

/* The least n >= 0 with pw__s_of_ns(n) >= z, for 0 <= z < 2**34, without a
 * division (this runs on every call_later of the event loops: three divisions
 * were a tenth of one).  pw__s_of_ns(n) is n / 1e9 rounded to the nearest
 * float, so it reaches z exactly when n / 1e9 passes the midpoint m between z
 * and the float below it.  m = odd * 2**-s with s >= 20 here, and n / 1e9 =
 * n / (5**9 2**9) never equals it (the powers of two cannot match), so n =
 * floor(m * 1e9) + 1: odd < 2**55 times 1e9 < 2**30, taken exactly in two
 * 64-bit halves and shifted right by s. */
static uint64_t ceil_pos(double z) {
  if (z == 0)
    return 0; /* -0.0 as well, whose sign bit would be read below */
  uint64_t bits;
  memcpy(&bits, &z, sizeof bits);
  int exp = (int)(bits >> 52);
  uint64_t frac = bits & ((UINT64_C(1) << 52) - 1);
  if (exp <= 1)
    return 1; /* below 2**-1021: 1 ns reads 1e-9, already past it */
  /* z = (2**52 + frac) * 2**(exp - 1075); the float below it is one unit of
   * that exponent lower, or half a unit when z is a power of two. */
  uint64_t odd = frac ? 2 * (frac | (UINT64_C(1) << 52)) - 1 : (UINT64_C(1) << 54) - 1;
  int s = frac ? 1076 - exp : 1077 - exp;
  if (s >= 96)
    return 1; /* m * 1e9 < 2**85 * 2**-96 < 1 */
  /* p = odd * 1e9 = hi * 2**32 + lo; t = floor(p / 2**32). */
  uint64_t lo = (odd & 0xFFFFFFFFu) * 1000000000u, hi = (odd >> 32) * 1000000000u;
  uint64_t t = hi + (lo >> 32);
  uint64_t q = s >= 32 ? t >> (s - 32) /* floor(floor(p / 2**32) / 2**(s-32)) */
                       : t << (32 - s) | (lo & 0xFFFFFFFFu) >> s; /* < 2**64: z < 2**34 */
  return q + 1;
}

/* The least count n whose pw__s_of_ns(n) >= x (finite x): what a float time or
 * span becomes.  -1 if n lies outside [MIN_NS - 1, MAX_NS + 1]. */
static int ceil_ns(double x, int64_t *out) {
  if (x >= 0) {
    if (x >= 9223372037.0)
      return -1;
    uint64_t u = ceil_pos(x);
    if (u > (uint64_t)NEVER_NS)
      return -1;
    *out = (int64_t)u;
    return 0;
  }
  /* By symmetry: the least n with s(n) >= x is 1 - the least m with s(m) > -x. */
  if (-x >= 9223372037.0)
    return -1;
  uint64_t u = ceil_pos(nextafter(-x, INFINITY));
  if (u == 0 || u - 1 > (uint64_t)INT64_MAX - 1) /* 1 - u < MIN_NS - 1 */
    return -1;
  *out = -(int64_t)(u - 1);
  return 0;
}

/* What a time or span argument holds: an exact count of nanoseconds (an
 * integer), or a float (any other number, through __float__; +-inf included).
 * Returns 1 for exact, 0 for float, -1 with an exception. */
static int parse_seconds(PyObject *o, const char *what, int64_t *exact, double *d) {
  if (!PyLong_Check(o) && !PyFloat_Check(o) && PyIndex_Check(o)) {
    PyObject *i = PyNumber_Index(o); /* an integer type of a library's own */
    if (i) {
      int r = parse_seconds(i, what, exact, d);
      Py_DECREF(i);
      return r;
    }
    /* __index__ refused (a 0-d float array has one that does): the number
     * may still have a __float__. */
    if (!PyErr_ExceptionMatches(PyExc_TypeError))
      return -1;
    PyErr_Clear();
  }
  if (PyLong_Check(o)) {
    int overflow;
    long long s = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (s == -1 && PyErr_Occurred())
      return -1;
    if (overflow || s > INT64_MAX / 1000000000 || s < -(INT64_MAX / 1000000000))
      return out_of_range(what);
    *exact = (int64_t)s * 1000000000;
    return 1;
  }
  if (!PyFloat_Check(o) && !PyNumber_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s must be a number of seconds, not %.100s", what,
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  *d = PyFloat_AsDouble(o);
  if (*d == -1.0 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) { /* a huge Fraction */
      PyErr_Clear();
      return out_of_range(what);
    }
    return -1;
  }
  if (isnan(*d)) {
    PyErr_Format(PyExc_ValueError, "%s must not be NaN", what);
    return -1;
  }
  if (isinf(*d) && !PyFloat_Check(o)) {
    /* Decimal('1e400') says inf to __float__, though it is finite: only a
     * number that equals infinity means never (or the past). */
    PyObject *inf = PyFloat_FromDouble(*d);
    int same = inf ? PyObject_RichCompareBool(o, inf, Py_EQ) : -1;
    Py_XDECREF(inf);
    if (same < 0)
      return -1;
    if (!same)
      return out_of_range(what);
  }
  return 0;
}

/*
 * The rules by which a finite float becomes a count of nanoseconds, one a
 * conversion (0, or -1 when the count leaves the clock's range):
 *
 * span (a delay, interval, tick, advance(), close()'s timeout): the nearest
 * nanosecond.
 *
 * time (a deadline: call_at, reschedule, a ManualWheel's start): the least
 * count that reads, in pw__s_of_ns, at least as late as the float the caller
 * passed: then `time() >= when` holds once the clock reached the deadline,
 * whatever float the program compares (the nearest count can read below it,
 * and a program that re-arms until its comparison holds would wait on a
 * virtual clock that never moves on).  A float that is a whole number of
 * nanoseconds, as every when() and time() is, maps to that count.
 *
 * floor (run_due, collect_due): the last count that reads at most it, so
 * what is due is exactly the timers whose when() <= it; reading (advance_to):
 * the clock reaches the first reading at or after it, to the last nanosecond
 * of that reading, so a deadline made from the same float is due and
 * time() >= it.
 */
static int span_rule(double d, int64_t *out) {
  d = nearbyint(d * 1e9);
  /* 2**63 is exact as a double; the largest double below it fits an int64
   * and stays below NEVER_NS, and symmetrically above PAST_NS + 1. */
  if (d >= 9223372036854775808.0 || d <= -9223372036854775808.0)
    return -1;
  *out = (int64_t)d;
  return 0;
}

static int time_rule(double d, int64_t *out) {
  return ceil_ns(d, out) < 0 || *out < MIN_NS || *out > MAX_NS ? -1 : 0;
}

/* Ceil of the next float, less one; MAX_NS at the top of the range. */
static int floor_rule(double y, int64_t *out) {
  int64_t n;
  double top = pw__s_of_ns(MAX_NS);
  if (y >= top) {
    *out = MAX_NS;
    return y > top ? -1 : 0;
  }
  if (ceil_ns(nextafter(y, INFINITY), &n) < 0 || n - 1 < MIN_NS)
    return -1;
  *out = n - 1;
  return 0;
}

static int reading_rule(double d, int64_t *out) {
  int64_t first;
  return time_rule(d, &first) < 0 ? -1 : floor_rule(pw__s_of_ns(first), out);
}

/* Any number to a count: an integer exactly, +-inf to NEVER_NS / PAST_NS,
 * any other number by `rule`; OverflowError naming `what` out of range. */
static int to_ns(PyObject *o, const char *what, int (*rule)(double, int64_t *), int64_t *out) {
  double d;
  int r = parse_seconds(o, what, out, &d);
  if (r != 0)
    return r < 0 ? -1 : 0;
  if (isinf(d)) {
    *out = d > 0 ? NEVER_NS : PAST_NS;
    return 0;
  }
  return rule(d, out) < 0 ? out_of_range(what) : 0;
}

int pw__seconds_to_ns(PyObject *o, const char *what, int64_t *out) {
  return to_ns(o, what, span_rule, out);
}

int pw__time_to_ns(PyObject *o, const char *what, int64_t *out) {
  return to_ns(o, what, time_rule, out);
}

int pw__target_to_ns(PyObject *o, const char *what, bool whole_reading, int64_t *out) {
  return to_ns(o, what, whole_reading ? reading_rule : floor_rule, out);
}

/* The time rule for a float that is not NaN (+-inf included), without an
 * exception: -1 out of range.  For the event loop's fast path (loop.c),
 * which holds a double. */
int pw__float_time_to_ns(double d, int64_t *out) {
  if (isinf(d)) {
    *out = d > 0 ? NEVER_NS : PAST_NS;
    return 0;
  }
  return time_rule(d, out);
}

/* The floor rule (or, with whole_reading, the reading rule) for a finite
 * float, without an exception: -1 out of range.  For the event loops'
 * collection (manual.c), which holds doubles. */
int pw__float_target_to_ns(double d, bool whole_reading, int64_t *out) {
  return whole_reading ? reading_rule(d, out) : floor_rule(d, out);
}

/* a + b for a time and a span, either possibly +-inf (NEVER_NS, PAST_NS);
 * OverflowError naming `what` when a finite sum leaves the range. */
int pw__add_time(int64_t a, int64_t b, const char *what, int64_t *out) {
  if (a == NEVER_NS || b == NEVER_NS) {
    *out = NEVER_NS;
    return 0;
  }
  if (a == PAST_NS || b == PAST_NS) {
    *out = PAST_NS;
    return 0;
  }
  if ((b > 0 && a > INT64_MAX - 1 - b) || (b < 0 && a < INT64_MIN + 2 - b))
    return out_of_range(what);
  *out = a + b;
  return 0;
}

/* ------------------------------------------------------------------ */
/* lateness histogram: 8 linear sub-buckets per power of two            */

static uint64_t late_bucket_top(int b) {
  if (b < 16)
    return (uint64_t)b;
  int e = (b - 8) / 8 + 3, sub = (b - 8) % 8;
  return (((uint64_t)(8 + sub + 1)) << (e - 3)) - 1;
}

double pw__late_quantile(const core *c, double q) {
  if (!c->late_n)
    return 0.0;
  uint64_t want = (uint64_t)ceil(q * (double)c->late_n), seen = 0;
  if (want < 1)
    want = 1;
  for (int b = 0; b < LATE_BUCKETS; b++) {
    seen += c->late[b];
    if (seen >= want) {
      uint64_t top = late_bucket_top(b);
      return (double)(top < c->late_max_ns ? top : c->late_max_ns) / 1e9;
    }
  }
  return (double)c->late_max_ns / 1e9;
}
