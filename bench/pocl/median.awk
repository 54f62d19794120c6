# median(list): the median of the numbers in a space-separated list (an
# insertion sort: the lists are a few rounds long). Shared by
# compare-engines.sh and remote-bench.sh, which add their tables with a
# second -f.
function median(list,   n, v, i, j, t) {
  n = split(list, v, " ")
  for (i = 2; i <= n; ++i) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; --j) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
