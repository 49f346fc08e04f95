// Multiple-comparison corrections: the experiments one commit (or pull
// request) changed are one family, and a verdict on each must keep the error
// rate of the whole family at alpha. Pure functions.
//
//   holm  Holm (1979) step-down: family-wise error rate <= alpha under any
//         dependence between the tests. Its matching intervals are the
//         Bonferroni ones, at level 1 - alpha / m.
//   bh    Benjamini & Hochberg (1995) step-up: false discovery rate <= alpha
//         (independent or positively dependent tests). Its matching
//         intervals are Benjamini & Yekutieli's (2005) false-coverage-rate
//         ones, at level 1 - R alpha / m with R the number of rejections.
//   none  each test on its own at alpha.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace trainq::stats {

enum class Correction { kHolm, kBh, kNone };

Result<Correction> ParseCorrection(std::string_view text);  // "holm", "bh" or "none"
std::string_view CorrectionName(Correction c);              // "holm", "bh", "none"
std::string_view CorrectionTitle(Correction c);             // "Holm", "BH", "no correction"

// Adjusted p-values, in the order given; each in [0, 1]. A p-value stands for
// one member of the family; a member without a test counts as p = 1 (it
// still counts in the family size m, so that the answer for the others does
// not move as runs finish). Holm: p~(i) = max_{j<=i} min(1, (m-j+1) p(j))
// over the sorted p; BH: p~(i) = min_{j>=i} min(1, m p(j) / j).
std::vector<double> HolmAdjust(std::span<const double> p);
std::vector<double> BhAdjust(std::span<const double> p);
std::vector<double> Adjust(Correction c, std::span<const double> p);

// The confidence level of the interval that matches a verdict at `alpha`
// after the correction, in a family of `m` with `rejections` rejected:
// 1 - alpha / m (Holm: Bonferroni width), 1 - max(1, rejections) alpha / m
// (BH: false coverage rate), 1 - alpha (none).
double IntervalLevel(Correction c, double alpha, int m, int rejections);

}  // namespace trainq::stats
