# Independent recomputation of the one-run audit p-value with exact rationals
# at eps = log(3) (p = 3/4), for the test's table.
from fractions import Fraction as F
from math import comb
def pval(m, r, v, p, delta):
    pmf = lambda k: comb(r, k) * p**k * (1-p)**(r-k)
    beta = sum(pmf(k) for k in range(v, r+1))
    alpha, s = F(0), F(0)
    for i in range(1, v+1):
        s += pmf(v-i)
        alpha = max(alpha, s / i)
    return beta + 2*m*delta*alpha
for (m, r, v, d) in [(100, 50, 40, F(0)), (100, 50, 40, F(1, 10**5)), (1000, 200, 150, F(1, 10**5)), (10, 10, 10, F(1, 100))]:
    print(m, r, v, d, float(pval(m, r, v, F(3, 4), d)))
