"""Route-level search for FedEx CARP (``fl_uav.planning.routing``): annealing over explicit
tours, a descent over inter-route neighbourhoods, and exact tours by Held-Karp.

FedEx (Bian, Shen, Xu) Sec. VI-B searches assignments with a Gibbs sampler and solves each
UAV's tour by 2-OPT. This module is ours (FedEx is silent on it): it improves the plan on the
tours themselves, where a move changes both who serves a client and where in the tour it is
served, each evaluated in O(1) from the distance matrix (issue 27 item 5).

* Moves: relocate a segment of 1-3 clients (optionally reversed) to any position of any tour,
  including its own (Or-opt); exchange segments of 1-2 clients between two tours (swap,
  cross-exchange); 2-OPT within a tour; 2-OPT* between two tours (tails exchanged, or head
  joined to reversed head and tail to tail); in the annealing also ruin & recreate (a random
  client and its nearest clients removed, ``rr_min``-``rr_max`` in all, and put back one by
  one, in random order, where they cost least).
* Annealing: random moves, accepted with exp(-delta / (t F0)), t cooled geometrically from
  ``t0`` to ``t_end`` over ``moves`` moves; F0 = the start's cost. The annealed cost is
  eq. (27) for 'async', sum_k Delta_k for 'total', and for 'sync' max_k Delta_k +
  ``sync_total_weight`` sum_k Delta_k (eq. (25) alone is flat for every move that misses the
  longest tour). Energy over the budget (eqs. (26)/(28)) costs ``penalty`` x F0 per kJ, so an
  infeasible start is repaired; the best budget-feasible state seen is kept.
* Descent: every move of the list above (not ruin & recreate), best improvement over the
  whole neighbourhood, with the exact comparison of ``routing._key`` (budget excess, then
  eq. (25) as the sorted RTT vector, or eq. (27)), so it never leaves the budget. Then every
  tour is replaced by its shortest order (Held-Karp, <= ``HELD_KARP_MAX`` clients), which
  only shortens tours, and the descent runs again if that changed anything.
* ``anneal_search`` (the planner's multi-start): the basin a run ends in is mostly set by
  where its start puts the boundaries between the UAVs' areas, and independent runs of
  200 000 moves missed the best plan by 2-4 % on a third of the held-in instances; so many
  short runs from sectors rotated evenly around the depot race, and only the best few are
  annealed again (from a lower temperature) and descended.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np

HELD_KARP_MAX = 16
RESYNC_EVERY = 1000   # annealing moves between two recomputations of the current cost


def held_karp_tour(dist: Sequence[Sequence[float]], nodes: Sequence[int]) -> list[int]:
    """Shortest closed tour depot (node 0) -> ``nodes`` -> depot, by dynamic programming.

    Exact (Held-Karp, O(2^n n^2), vectorised); at most ``HELD_KARP_MAX`` nodes. Ties go to the
    lowest index, so the result is deterministic.
    """
    nodes = sorted(int(n) for n in nodes)
    n = len(nodes)
    if n > HELD_KARP_MAX:
        raise ValueError(f'held_karp_tour is limited to {HELD_KARP_MAX} nodes, got {n}')
    if n <= 2:
        return nodes
    d = np.asarray(dist, dtype=float)
    sub = d[np.ix_(nodes, nodes)]
    full = 1 << n
    cost = np.full((full, n), np.inf)
    parent = np.full((full, n), -1, dtype=np.int64)
    cost[1 << np.arange(n), np.arange(n)] = d[0, nodes]
    masks = np.arange(full)
    popcount = np.zeros(full, dtype=np.int64)
    for bit in range(n):
        popcount += (masks >> bit) & 1
    for size in range(2, n + 1):
        layer = masks[popcount == size]
        for j in range(n):
            with_j = layer[(layer >> j) & 1 == 1]
            prev = with_j ^ (1 << j)
            cand = cost[prev] + sub[:, j]          # (len, n): come from i to j
            best = np.argmin(cand, axis=1)
            cost[with_j, j] = cand[np.arange(len(with_j)), best]
            parent[with_j, j] = best
    last = int(np.argmin(cost[full - 1] + d[nodes, 0]))
    order, mask = [], full - 1
    while last >= 0:
        order.append(nodes[last])
        prev_last = int(parent[mask, last])
        mask ^= 1 << last
        last = prev_last
    return order[::-1]


def tour_length(dist: Sequence[Sequence[float]], nodes: Sequence[int]) -> float:
    total, prev = 0.0, 0
    for n in nodes:
        total += dist[prev][n]
        prev = n
    return total + dist[prev][0]


def nearest_neighbour_tour(dist: list[list[float]], nodes: Sequence[int]) -> list[int]:
    """Greedy tour from the depot: always fly to the nearest unvisited node (ties: lowest)."""
    left, cur, tour = set(nodes), 0, []
    while left:
        cur = min(left, key=lambda n: (dist[cur][n], n))
        left.remove(cur)
        tour.append(cur)
    return tour


def two_opt(dist: list[list[float]], tour: Sequence[int]) -> list[int]:
    """2-OPT (Croes 1958; FedEx Sec. VI-B-1): reverse segments while that shortens the tour.

    First improvement; stops after a full scan of all edge pairs finds no improving move, so
    the result is never longer than the input.
    """
    t = [0, *tour, 0]
    n = len(t)
    improved = True
    while improved:
        improved = False
        for i in range(1, n - 2):
            a, b = t[i - 1], t[i]
            for j in range(i + 1, n - 1):
                c, e = t[j], t[j + 1]
                if dist[a][c] + dist[b][e] < dist[a][b] + dist[c][e] - 1e-9:
                    t[i:j + 1] = t[j:i - 1:-1]
                    b = t[i]
                    improved = True
    return t[1:-1]



def objective_of(objective: str, rtts: Sequence[float], sizes: Sequence[int]) -> float:
    """FedEx eq. (25) 'sync' max_k Delta_k, eq. (27) 'async' sum_k R_k Delta_k^2, or 'total'
    sum_k Delta_k; ``rtts`` 0 for an empty tour. The one definition: ``routing.objective_value``
    (which checks the name and sets empty tours to 0) and ``plan_key`` call it."""
    if objective == 'sync':
        return max(rtts)
    if objective == 'async':
        return float(sum(n * r * r for r, n in zip(rtts, sizes)))
    return float(sum(rtts))


def plan_key(objective: str, rtts: Sequence[float], sizes: Sequence[int],
             excess_j: float) -> tuple:
    """The planner's lexicographic quality, smaller is better: the energy over the budget
    (eqs. (26)/(28), summed over the tours, J rounded to 1e-6), then for 'sync' the RTTs
    sorted largest first (eq. (25) is the first; the rest rank plans of equal max), else
    ``objective_of``. ``rtts`` 0 for an empty tour. The one definition: ``routing._key``
    (the Gibbs sampler and its descent) and ``RouteSearch.key`` (the route search) call it."""
    excess = round(excess_j, 6)
    if objective == 'sync':
        return (excess, *sorted(rtts, reverse=True))
    return (excess, objective_of(objective, rtts, sizes))


class RouteSearch:
    """Tours of node indices (depot 0, client c = node c + 1), their lengths and costs.

    problem: a ``routing.RoutingProblem``; objective: 'sync' | 'async' | 'total'.
    """

    def __init__(self, problem, objective: str, tours: Sequence[Sequence[int]]) -> None:
        self.d = problem._dist
        self.objective = objective
        self.hover = problem.hover_time_per_client_s
        self.inv_v = 1.0 / problem.speed_m_s
        self.e_client = problem.energy_per_client_j
        self.e_m = problem.energy_per_m_j
        self.budget = problem.energy_budget_j
        self.k = problem.n_uavs
        self.routes = [list(t) for t in tours]
        self.length = [tour_length(self.d, r) for r in self.routes]

    # -- costs ------------------------------------------------------------------------------
    def rtt(self, length: float, n: int) -> float:
        """``RoutingProblem.round_trip_s`` (FedEx eq. (9)) of one tour, 0 if it is empty.

        With 1 / V precomputed, so it may differ from ``round_trip_s`` in the last bit
        (``descend`` compares keys with a relative tolerance of 1e-9). Kept so: with ``L / V``
        here the planner returned another plan of the same cost (ties broken by the last bit)
        on 4 of the tests' instances."""
        return n * self.hover + length * self.inv_v if n else 0.0

    def excess(self, length: float, n: int) -> float:
        """Energy over the budget (J) of one tour; summed over the tours, ``routing._excess_j``
        of ``RoutingProblem.tour_energy_j``."""
        return max(0.0, n * self.e_client + length * self.e_m - self.budget)

    def key(self, lengths: Sequence[float] | None = None,
            routes: Sequence[Sequence[int]] | None = None) -> tuple:
        """``plan_key`` of these tours (the same as ``routing._key`` of their plan)."""
        lengths = self.length if lengths is None else lengths
        sizes = [len(r) for r in (self.routes if routes is None else routes)]
        return plan_key(self.objective, [self.rtt(ln, n) for ln, n in zip(lengths, sizes)],
                        sizes, sum(self.excess(ln, n) for ln, n in zip(lengths, sizes)))

    # -- annealing --------------------------------------------------------------------------
    def anneal(self, rng: random.Random, moves: int, t0: float, t_end: float,
               sync_total_weight: float, penalty: float, rr_rate: float = 0.0,
               rr_min: int = 3, rr_max: int = 8) -> None:
        """Simulated annealing over the moves in the module docstring (a share ``rr_rate`` of
        them ruin & recreate); keeps the best budget-feasible state seen (the last state if
        none was)."""
        d, k, obj = self.d, self.k, self.objective
        hover, inv_v, e_client, e_m, budget = (self.hover, self.inv_v, self.e_client,
                                               self.e_m, self.budget)
        routes, length = self.routes, self.length
        w = sync_total_weight

        # ``rtt`` and ``excess`` inlined for speed (also in ``delta2``): the annealed cost
        # below is not ``key``; it only steers the walk, whose result ``key`` then compares.
        def rtt_of(ln, n):
            return n * hover + ln * inv_v if n else 0.0

        def exc_of(ln, n):
            e = n * e_client + ln * e_m - budget
            return e if e > 0.0 else 0.0

        rtt = [rtt_of(length[a], len(routes[a])) for a in range(k)]
        exc = [exc_of(length[a], len(routes[a])) for a in range(k)]

        def part(a_rtt, n):  # the per-tour part of the annealed cost
            if obj == 'async':
                return n * a_rtt * a_rtt
            return (w if obj == 'sync' else 1.0) * a_rtt

        def total_cost():
            c = sum(part(rtt[a], len(routes[a])) for a in range(k))
            if obj == 'sync':
                c += max(rtt)
            return c

        f0 = max(total_cost(), 1e-12)
        pen = penalty * f0 / 1000.0   # per J of excess
        cur = total_cost() + pen * sum(exc)
        best_cost = cur if not any(exc) else math.inf
        best_routes = [list(r) for r in routes] if not any(exc) else None

        def others_max(a, b):
            m = 0.0
            for c in range(k):
                if c != a and c != b and rtt[c] > m:
                    m = rtt[c]
            return m

        is_sync, is_async = obj == 'sync', obj == 'async'
        lin = w if is_sync else 1.0

        def delta2(a, la, na, b, lb, nb):
            """Cost change if tour a gets (length la, na clients) and tour b (lb, nb)."""
            ra = na * hover + la * inv_v if na else 0.0
            rb = nb * hover + lb * inv_v if nb else 0.0
            ea = na * e_client + la * e_m - budget
            oa = rtt[a]
            if a == b:
                if is_async:
                    n0 = len(routes[a])
                    dc = na * ra * ra - n0 * oa * oa
                else:
                    dc = lin * (ra - oa)
                    if is_sync:
                        m = others_max(a, a)
                        dc += (ra if ra > m else m) - (oa if oa > m else m)
                de = (ea if ea > 0.0 else 0.0) - exc[a]
                return dc + pen * de, ra, rb
            ob = rtt[b]
            eb = nb * e_client + lb * e_m - budget
            if is_async:
                n0a, n0b = len(routes[a]), len(routes[b])
                dc = na * ra * ra + nb * rb * rb - n0a * oa * oa - n0b * ob * ob
            else:
                dc = lin * (ra + rb - oa - ob)
                if is_sync:
                    m = others_max(a, b)
                    old = oa if oa > ob else ob
                    new = ra if ra > rb else rb
                    dc += (new if new > m else m) - (old if old > m else m)
            de = (ea if ea > 0.0 else 0.0) + (eb if eb > 0.0 else 0.0) - exc[a] - exc[b]
            return dc + pen * de, ra, rb

        n_nodes = len(d)
        # each client's clients by distance (itself first), for ruin & recreate
        near = [sorted(range(1, n_nodes), key=lambda c, u=u: (d[u][c], c))
                for u in range(1, n_nodes)]
        rr_max = min(rr_max, n_nodes - 1)
        rr_min = min(rr_min, rr_max)
        ratio = (t_end / t0) ** (1.0 / max(moves - 1, 1))
        temp = t0 * f0
        rand = rng.random

        def randrange(lo, hi=None):   # int(U n): faster than random.randrange
            return int(rand() * lo) if hi is None else lo + int(rand() * (hi - lo))
        log = math.log
        for step in range(moves):
            temp *= ratio
            if step % RESYNC_EVERY == RESYNC_EVERY - 1:   # no drift from summed deltas
                cur = total_cost() + pen * sum(exc)
            # Threshold: accept if delta < -temp ln(U) (same as exp(-delta / temp) > U).
            thresh = -temp * log(1.0 - rand())
            kind = rand()
            if kind < rr_rate:  # ruin (a client and its nearest) and recreate (best insertion)
                saved = ([list(r) for r in routes], list(length), list(rtt), list(exc))
                removed = near[randrange(n_nodes - 1)][:randrange(rr_min, rr_max + 1)]
                gone = set(removed)
                for a in range(k):
                    if any(x in gone for x in routes[a]):
                        routes[a] = [x for x in routes[a] if x not in gone]
                        length[a] = tour_length(d, routes[a])
                        rtt[a] = rtt_of(length[a], len(routes[a]))
                        exc[a] = exc_of(length[a], len(routes[a]))
                removed = list(removed)
                rng.shuffle(removed)
                for u in removed:
                    best_ins = None
                    for b in range(k):
                        # The cost grows with the tour's length: the shortest insertion into
                        # tour b is its best one.
                        rb_ = routes[b]
                        nb = len(rb_)
                        x, du = 0, d[u]
                        best_inc, best_j = math.inf, 0
                        for j in range(nb + 1):
                            y = rb_[j] if j < nb else 0
                            inc = du[x] + du[y] - d[x][y]
                            if inc < best_inc:
                                best_inc, best_j = inc, j
                            x = y
                        lb = length[b] + best_inc
                        delta = delta2(b, lb, nb + 1, b, lb, nb + 1)[0]
                        if best_ins is None or delta < best_ins[0]:
                            best_ins = (delta, b, best_j, lb)
                    _, b, j, lb = best_ins
                    routes[b].insert(j, u)
                    length[b], rtt[b] = lb, rtt_of(lb, len(routes[b]))
                    exc[b] = exc_of(lb, len(routes[b]))
                new_cur = total_cost() + pen * sum(exc)
                if new_cur - cur < thresh:
                    cur = new_cur
                else:
                    routes[:], length[:], rtt[:], exc[:] = saved
                    continue
            elif (kind := (kind - rr_rate) / (1.0 - rr_rate)) < 0.4:  # relocate 1-3 (Or-opt)
                a = randrange(k)
                ra_ = routes[a]
                na = len(ra_)
                if not na:
                    continue
                seg = 1 if kind < 0.25 else (2 if kind < 0.34 else 3)
                if seg > na:
                    continue
                i = randrange(na - seg + 1)
                f, e = ra_[i], ra_[i + seg - 1]
                p = ra_[i - 1] if i else 0
                q = ra_[i + seg] if i + seg < na else 0
                inner = 0.0
                for t in range(i, i + seg - 1):
                    inner += d[ra_[t]][ra_[t + 1]]
                rem = d[p][q] - d[p][f] - d[e][q] - inner
                b = randrange(k)
                rev = seg > 1 and rand() < 0.5
                s_first, s_last = (e, f) if rev else (f, e)
                if b == a:
                    nred = na - seg
                    j = randrange(nred + 1) - 1   # insert after reduced position j
                    if j == i - 1:
                        continue
                    x = (ra_[j] if j < i else ra_[j + seg]) if j >= 0 else 0
                    j1 = j + 1
                    y = (ra_[j1] if j1 < i else ra_[j1 + seg]) if j1 < nred else 0
                    ins = d[x][s_first] + d[s_last][y] - d[x][y]
                    la = length[a] + rem + ins + inner
                    delta, ra, _ = delta2(a, la, na, a, la, na)
                    if delta < thresh:
                        segment = ra_[i:i + seg]
                        if rev:
                            segment.reverse()
                        rest = ra_[:i] + ra_[i + seg:]
                        routes[a] = rest[:j + 1] + segment + rest[j + 1:]
                        length[a], rtt[a], exc[a] = la, ra, exc_of(la, na)
                        cur += delta
                    else:
                        continue
                else:
                    rb_ = routes[b]
                    nb = len(rb_)
                    j = randrange(nb + 1) - 1
                    x = rb_[j] if j >= 0 else 0
                    y = rb_[j + 1] if j + 1 < nb else 0
                    ins = d[x][s_first] + d[s_last][y] - d[x][y]
                    la = length[a] + rem
                    lb = length[b] + ins + inner
                    delta, ra, rb = delta2(a, la, na - seg, b, lb, nb + seg)
                    if delta < thresh:
                        segment = ra_[i:i + seg]
                        if rev:
                            segment.reverse()
                        routes[a] = ra_[:i] + ra_[i + seg:]
                        routes[b] = rb_[:j + 1] + segment + rb_[j + 1:]
                        length[a], rtt[a], exc[a] = la, ra, exc_of(la, na - seg)
                        length[b], rtt[b], exc[b] = lb, rb, exc_of(lb, nb + seg)
                        cur += delta
                    else:
                        continue
            elif kind < 0.65:   # exchange segments of 1-2 clients between two tours
                a, b = randrange(k), randrange(k)
                if a == b:
                    continue
                ra_, rb_ = routes[a], routes[b]
                na, nb = len(ra_), len(rb_)
                sa = 1 if rand() < 0.7 else 2
                sb = 1 if rand() < 0.7 else 2
                if sa > na or sb > nb:
                    continue
                i, j = randrange(na - sa + 1), randrange(nb - sb + 1)
                fa, ea, fb, eb = ra_[i], ra_[i + sa - 1], rb_[j], rb_[j + sb - 1]
                pa = ra_[i - 1] if i else 0
                qa = ra_[i + sa] if i + sa < na else 0
                pb = rb_[j - 1] if j else 0
                qb = rb_[j + sb] if j + sb < nb else 0
                ia = d[fa][ea] if sa == 2 else 0.0
                ib = d[fb][eb] if sb == 2 else 0.0
                la = length[a] - d[pa][fa] - d[ea][qa] - ia + d[pa][fb] + ib + d[eb][qa]
                lb = length[b] - d[pb][fb] - d[eb][qb] - ib + d[pb][fa] + ia + d[ea][qb]
                na2, nb2 = na - sa + sb, nb - sb + sa
                delta, ra, rb = delta2(a, la, na2, b, lb, nb2)
                if delta < thresh:
                    routes[a] = ra_[:i] + rb_[j:j + sb] + ra_[i + sa:]
                    routes[b] = rb_[:j] + ra_[i:i + sa] + rb_[j + sb:]
                    length[a], rtt[a], exc[a] = la, ra, exc_of(la, na2)
                    length[b], rtt[b], exc[b] = lb, rb, exc_of(lb, nb2)
                    cur += delta
                else:
                    continue
            elif kind < 0.85:   # 2-OPT within a tour
                a = randrange(k)
                ra_ = routes[a]
                na = len(ra_)
                if na < 3:
                    continue
                i, j = randrange(na), randrange(na)
                if i > j:
                    i, j = j, i
                if j - i < 1:
                    continue
                p = ra_[i - 1] if i else 0
                q = ra_[j + 1] if j + 1 < na else 0
                la = (length[a] + d[p][ra_[j]] + d[ra_[i]][q] - d[p][ra_[i]]
                      - d[ra_[j]][q])
                delta, ra, _ = delta2(a, la, na, a, la, na)
                if delta < thresh:
                    routes[a] = ra_[:i] + ra_[i:j + 1][::-1] + ra_[j + 1:]
                    length[a], rtt[a], exc[a] = la, ra, exc_of(la, na)
                    cur += delta
                else:
                    continue
            else:               # 2-OPT*: exchange tails, or join head to reversed head
                a, b = randrange(k), randrange(k)
                if a == b:
                    continue
                ra_, rb_ = routes[a], routes[b]
                na, nb = len(ra_), len(rb_)
                i, j = randrange(na + 1), randrange(nb + 1)   # heads ra_[:i], rb_[:j]
                ha = ra_[i - 1] if i else 0      # last of a's head (depot if empty)
                ta = ra_[i] if i < na else 0     # first of a's tail
                hb = rb_[j - 1] if j else 0
                tb = rb_[j] if j < nb else 0
                cut_a, cut_b = d[ha][ta], d[hb][tb]
                if rand() < 0.5:   # a = head_a + tail_b, b = head_b + tail_a
                    # length split: head part of a = pre_a, tail part = length - pre_a - cut
                    pre_a = tour_prefix(d, ra_, i)
                    pre_b = tour_prefix(d, rb_, j)
                    la = pre_a + d[ha][tb] + (length[b] - pre_b - cut_b)
                    lb = pre_b + d[hb][ta] + (length[a] - pre_a - cut_a)
                    na2, nb2 = i + nb - j, j + na - i
                    delta, ra, rb = delta2(a, la, na2, b, lb, nb2)
                    if delta < thresh:
                        routes[a] = ra_[:i] + rb_[j:]
                        routes[b] = rb_[:j] + ra_[i:]
                    else:
                        continue
                else:              # a = head_a + reversed head_b, b = reversed tail_a + tail_b
                    pre_a = tour_prefix(d, ra_, i)
                    pre_b = tour_prefix(d, rb_, j)
                    la = pre_a + d[ha][hb] + pre_b
                    lb = (length[a] - pre_a - cut_a) + d[ta][tb] + (length[b] - pre_b - cut_b)
                    na2, nb2 = i + j, na - i + nb - j
                    delta, ra, rb = delta2(a, la, na2, b, lb, nb2)
                    if delta < thresh:
                        routes[a] = ra_[:i] + rb_[:j][::-1]
                        routes[b] = ra_[i:][::-1] + rb_[j:]
                    else:
                        continue
                length[a], rtt[a], exc[a] = la, ra, exc_of(la, na2)
                length[b], rtt[b], exc[b] = lb, rb, exc_of(lb, nb2)
                cur += delta
            # an accepted move
            if cur < best_cost - 1e-9 and not any(exc):
                best_cost = cur
                best_routes = [list(r) for r in routes]
        if best_routes is not None:
            self.routes = best_routes
        self.length = [tour_length(d, r) for r in self.routes]

    # -- descent ----------------------------------------------------------------------------
    def descend(self) -> None:
        """Best-improvement descent over every move, on ``key``; then Held-Karp tours."""
        while True:
            while self._best_move():
                pass
            changed = False
            for a, r in enumerate(self.routes):
                if 3 <= len(r) <= HELD_KARP_MAX:
                    tour = held_karp_tour(self.d, r)
                    ln = tour_length(self.d, tour)
                    if ln < self.length[a] - 1e-9:
                        self.routes[a], self.length[a] = tour, ln
                        changed = True
            if not changed:
                return

    def _candidates(self):
        """Every move as (tours changed, their new lists); intra-tour moves first."""
        routes, k = self.routes, self.k
        for a in range(k):
            ra = routes[a]
            na = len(ra)
            for i in range(na):                       # 2-OPT
                for j in range(i + 1, na):
                    yield ((a, ra[:i] + ra[i:j + 1][::-1] + ra[j + 1:]),)
            for seg in (1, 2, 3):                     # Or-opt within the tour
                for i in range(na - seg + 1):
                    segment = ra[i:i + seg]
                    rest = ra[:i] + ra[i + seg:]
                    for j in range(len(rest) + 1):
                        if j == i:
                            continue
                        yield ((a, rest[:j] + segment + rest[j:]),)
                        if seg > 1:
                            yield ((a, rest[:j] + segment[::-1] + rest[j:]),)
        for a in range(k):
            for b in range(k):
                if a == b:
                    continue
                ra, rb = routes[a], routes[b]
                na, nb = len(ra), len(rb)
                for seg in (1, 2, 3):                 # relocate a segment a -> b
                    for i in range(na - seg + 1):
                        segment = ra[i:i + seg]
                        rest = ra[:i] + ra[i + seg:]
                        for j in range(nb + 1):
                            yield ((a, rest), (b, rb[:j] + segment + rb[j:]))
                            if seg > 1:
                                yield ((a, rest), (b, rb[:j] + segment[::-1] + rb[j:]))
                if a < b:
                    for sa in (1, 2):                 # exchange segments
                        for sb in (1, 2):
                            for i in range(na - sa + 1):
                                for j in range(nb - sb + 1):
                                    yield ((a, ra[:i] + rb[j:j + sb] + ra[i + sa:]),
                                           (b, rb[:j] + ra[i:i + sa] + rb[j + sb:]))
                    for i in range(na + 1):           # 2-OPT*
                        for j in range(nb + 1):
                            yield ((a, ra[:i] + rb[j:]), (b, rb[:j] + ra[i:]))
                            yield ((a, ra[:i] + rb[:j][::-1]), (b, ra[i:][::-1] + rb[j:]))

    def _best_move(self) -> bool:
        best = self.key()
        best_move = None
        d = self.d
        for move in self._candidates():
            lengths = list(self.length)
            routes = list(self.routes)
            for a, r in move:
                lengths[a] = tour_length(d, r)
                routes[a] = r
            key = self.key(lengths, routes)
            if _less(key, best):
                best, best_move = key, (move, lengths, routes)
        if best_move is None:
            return False
        _, self.length, self.routes = best_move
        return True


def _less(a: tuple, b: tuple) -> bool:
    """a < b with a tolerance of 1e-9 (relative) per element."""
    for x, y in zip(a, b):
        tol = 1e-9 * max(1.0, abs(y))
        if x < y - tol:
            return True
        if x > y + tol:
            return False
    return False


def tour_prefix(d, route: Sequence[int], i: int) -> float:
    """Length from the depot along route[:i] (to its last node; 0 for i = 0)."""
    total, prev = 0.0, 0
    for t in range(i):
        total += d[prev][route[t]]
        prev = route[t]
    return total


def sector_clients(problem, offset_rad: float) -> list[list[int]]:
    """Angular sectors around the depot with ~N / K clients each (R_k differ by at most 1),
    rotated by ``offset_rad``: one list of 0-based client indices per UAV, in angle order.
    The start of both the Gibbs chains (``routing``) and the annealing runs here."""
    rel = problem.clients_m - problem.depot_m
    angle = (np.arctan2(rel[:, 1], rel[:, 0]) + offset_rad) % (2 * math.pi)
    order = np.argsort(angle, kind='stable')
    return [[int(c) for c in chunk] for chunk in np.array_split(order, problem.n_uavs)]


def sector_tours(problem, offset_rad: float) -> list[list[int]]:
    """``sector_clients``, each sector's tour by nearest neighbour + 2-OPT (node indices)."""
    return [two_opt(problem._dist, nearest_neighbour_tour(problem._dist, [c + 1 for c in chunk]))
            for chunk in sector_clients(problem, offset_rad)]


def anneal_search(problem, objective: str, seed: int, n_starts: int, moves: int,
                  n_keep: int, refine_moves: int, t0: float, refine_t0: float, t_end: float,
                  sync_total_weight: float, penalty: float, rr_rate: float,
                  extra_starts: Sequence[Sequence[Sequence[int]]] = ()) -> RouteSearch:
    """Multi-start annealing with a race: ``n_starts`` short runs (``moves`` each) from
    sectors rotated evenly around the depot (plus a random offset), then the ``n_keep`` best
    distinct results annealed again (``refine_moves`` from ``refine_t0``) and descended; each
    of ``extra_starts`` is descended too. Returns the best by ``key``."""
    rng = random.Random(seed)
    offset = rng.uniform(0.0, 2.0 * math.pi)
    runs = []
    for s in range(n_starts):
        search = RouteSearch(problem, objective,
                             sector_tours(problem, offset + 2.0 * math.pi * s / n_starts))
        search.anneal(rng, moves, t0, t_end, sync_total_weight, penalty, rr_rate)
        runs.append(search)
    runs.sort(key=lambda r: r.key())
    kept, keys = [], set()
    for search in runs:
        key = tuple(round(x, 6) for x in search.key())
        if key not in keys:
            keys.add(key)
            kept.append(search)
        if len(kept) == n_keep:
            break
    best = None
    for search in kept:
        if refine_moves:
            search.anneal(rng, refine_moves, refine_t0, t_end, sync_total_weight, penalty,
                          rr_rate)
        search.descend()
        if best is None or _less(search.key(), best.key()):
            best = search
    for tours in extra_starts:
        search = RouteSearch(problem, objective, tours)
        search.descend()
        if best is None or _less(search.key(), best.key()):
            best = search
    return best
