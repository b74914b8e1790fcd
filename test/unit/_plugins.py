"""Plug-ins the plug-in tests name in configs (``test.unit._plugins:Name``), good and bad."""

from __future__ import annotations

import numpy as np

from fl_uav.aggregation.fedavg import FedAvg
from fl_uav.aggregation.strategy import AggregateResult, Strategy, weighted_mean_delta
from fl_uav.compression.codec import FrameKind, encode_frame
from fl_uav.compression.compressor import Compressor, NoCompression

SPEC = 'test.unit._plugins:'

#: (round_index, senders) of every RecordingFedAvg.aggregate call, in order (tests clear it).
AGGREGATE_CALLS: list[tuple[int, tuple[int, ...]]] = []
#: (layout, dataset) of every ConstantGenerator built, and (real labels, counts per class) of
#: each generate() call.
GENERATORS_BUILT: list[tuple[str, str]] = []
GENERATE_REQUESTS: list[tuple[np.ndarray, np.ndarray]] = []


class RecordingFedAvg(FedAvg):
    """FedAvg that notes each call in AGGREGATE_CALLS (module state: no state of its own)."""

    name = 'recording_fedavg'

    def aggregate(self, round_index, global_weights, updates):
        AGGREGATE_CALLS.append((round_index, tuple(u.sender for u in updates)))
        return super().aggregate(round_index, global_weights, updates)


class KeepsAllArguments(Strategy):
    """Takes **kwargs: gets every argument a strategy plug-in can get."""

    def __init__(self, **kwargs) -> None:
        self.arguments = kwargs

    def aggregate(self, round_index, global_weights, updates):
        return AggregateResult(dict(global_weights), empty=True)


class CountsRoundsWithoutStateDict(FedAvg):
    """Keeps a round count (state) but no state_dict: a checkpoint cannot hold it."""

    def __init__(self, server_lr: float = 1.0) -> None:
        super().__init__(server_lr)
        self.rounds_seen = 0

    def aggregate(self, round_index, global_weights, updates):
        self.rounds_seen += 1
        return super().aggregate(round_index, global_weights, updates)


class NeedsAlpha(Strategy):
    """A required constructor parameter no config key provides."""

    def __init__(self, alpha: float, server_lr: float = 1.0) -> None:
        self.alpha = alpha

    def aggregate(self, round_index, global_weights, updates):
        return AggregateResult(dict(global_weights), empty=True)


class NoAggregate(Strategy):
    """Forgets the one abstract method."""


class NotAStrategy:
    """Has aggregate, but not the base class."""

    def aggregate(self, round_index, global_weights, updates):
        return AggregateResult(dict(global_weights), empty=True)


def fedavg_half_step(server_lr: float) -> FedAvg:
    """A factory: FedAvg at half the configured server step."""
    return FedAvg(server_lr=server_lr / 2)


def returns_a_dict(server_lr: float) -> dict:
    """A factory whose product is not a Strategy."""
    return {'server_lr': server_lr}


NOT_CALLABLE = 42


class TopFractionWithMemory(Compressor):
    """Error-feedback top-k in a dense codec v1 frame: u = e + Δ; send the ``fraction`` of
    u's entries largest in magnitude (zeros elsewhere); e ← u − sent. One instance per drone."""

    name = 'top_fraction'

    def __init__(self, fraction: float = 0.25) -> None:
        self.fraction = fraction
        self.residual: dict[str, np.ndarray] = {}
        self._owed: dict[str, np.ndarray] = {}    # u of the last call: owed if it is lost

    def compress(self, delta, rng, *, round_index, sender, fingerprint, mask=None,
                 metadata=None, metrics=None):
        u = {n: self.residual.get(n, 0.0) + np.asarray(v, np.float32) for n, v in delta.items()}
        flat = np.concatenate([v.ravel() for v in u.values()])
        k = max(1, int(self.fraction * flat.size))
        threshold = np.partition(np.abs(flat), flat.size - k)[flat.size - k]
        sent = {n: np.where(np.abs(v) >= threshold, v, 0).astype(np.float32)
                for n, v in u.items()}
        self._owed = u
        self.residual = {n: (u[n] - sent[n]).astype(np.float32) for n in u}
        frame = encode_frame(FrameKind.UPDATE, round_index, sender, fingerprint, sent,
                             metadata or {})
        return frame, sent

    def upload_lost(self) -> None:
        self.residual = self._owed                        # nothing arrived: all of u is owed

    def state_dict(self) -> dict[str, np.ndarray]:
        return {f'residual/{n}': v for n, v in self.residual.items()}

    def load_state_dict(self, state) -> None:
        self.residual = {key.split('/', 1)[1]: np.asarray(v, np.float32)
                         for key, v in state.items()}


class GarbageFrame(NoCompression):
    """Returns bytes no station can decode."""

    def compress(self, delta, rng, **kwargs):
        return b'not a frame', dict(delta)


class HalvesButReportsWhole(NoCompression):
    """Sends Δ/2 but reports Δ: the engine would aggregate what the station never sees."""

    def compress(self, delta, rng, **kwargs):
        frame, _ = super().compress({n: v / 2 for n, v in delta.items()}, rng, **kwargs)
        return frame, dict(delta)


class ConstantGenerator:
    """A 'generative' top-up (no base class): every requested sample of class c is an image
    filled with c / 10, so it makes classes the device lacks."""

    makes_absent_classes = True

    def __init__(self, layout: str, dataset: str) -> None:
        GENERATORS_BUILT.append((layout, dataset))

    def generate(self, images, labels, counts_per_class, rng):
        GENERATE_REQUESTS.append((np.asarray(labels).copy(),
                                  np.asarray(counts_per_class).copy()))
        made_labels = np.repeat(np.arange(len(counts_per_class)), counts_per_class)
        made = np.ones((len(made_labels), *images.shape[1:]), images.dtype)
        return made * (made_labels / 10).reshape(-1, *([1] * (images.ndim - 1))).astype(
            images.dtype), made_labels.astype(np.int64)


class FailsToBuild(FedAvg):
    """Its constructor fails (a weights file that is not there)."""

    def __init__(self, server_lr: float = 1.0) -> None:
        raise FileNotFoundError('weights/fedavg_prior.npz')


class StateNotJson(FedAvg):
    """Its state holds a numpy scalar: neither JSON nor an array for the checkpoint."""

    def state_dict(self) -> dict:
        return {'last_norm': np.float32(1.5)}


class RaisesInRound2(FedAvg):
    """Its own bug shows in round 2."""

    def aggregate(self, round_index, global_weights, updates):
        if round_index == 2:
            raise RuntimeError('my rule broke')
        return super().aggregate(round_index, global_weights, updates)


class RaisesButInRound2(FedAvg):
    """Its bug shows in every round but round 2 (aggregation.max_failed_rounds counts in a
    row)."""

    def aggregate(self, round_index, global_weights, updates):
        if round_index != 2:
            raise RuntimeError('my rule broke')
        return super().aggregate(round_index, global_weights, updates)


class ReturnsNaN(FedAvg):
    """FedAvg, then a NaN in the first tensor (a division by zero of its own)."""

    def aggregate(self, round_index, global_weights, updates):
        result = super().aggregate(round_index, global_weights, updates)
        weights = dict(result.weights)
        first = next(iter(weights))
        weights[first] = np.full_like(weights[first], np.nan)
        return AggregateResult(weights, result.empty, result.metrics, result.used)


class ReturnsFlattened(FedAvg):
    """FedAvg, then the first tensor flattened (a reshape forgotten)."""

    def aggregate(self, round_index, global_weights, updates):
        result = super().aggregate(round_index, global_weights, updates)
        weights = dict(result.weights)
        first = next(iter(weights))
        weights[first] = weights[first].ravel()
        return AggregateResult(weights, result.empty, result.metrics, result.used)


class ReturnsFloat64(FedAvg):
    """FedAvg in float64 (an ``astype(w.dtype)`` forgotten)."""

    def aggregate(self, round_index, global_weights, updates):
        result = super().aggregate(round_index, global_weights, updates)
        return AggregateResult({n: w.astype(np.float64) for n, w in result.weights.items()},
                               result.empty, result.metrics, result.used)


class ReturnsWeightsDict(FedAvg):
    """Returns the weights dict instead of an AggregateResult."""

    def aggregate(self, round_index, global_weights, updates):
        return dict(super().aggregate(round_index, global_weights, updates).weights)


class AggregateWithoutRound(Strategy):
    """aggregate(self, updates): not the base's (round_index, global_weights, updates)."""

    def aggregate(self, updates):
        return None


class CompressWithoutKeywords(Compressor):
    """compress(self, delta, rng): takes none of the keywords the callers pass."""

    def compress(self, delta, rng):
        return b'', dict(delta)


class CompressRaisesInRound2(NoCompression):
    """Its own bug shows in round 2."""

    def compress(self, delta, rng, **kwargs):
        if kwargs['round_index'] == 2:
            raise ValueError('my compressor broke')
        return super().compress(delta, rng, **kwargs)


class AlwaysRaises(Strategy):
    """Its own bug shows in every round."""

    def aggregate(self, round_index, global_weights, updates):
        raise ZeroDivisionError('division by zero in my rule')


class CompressAlwaysRaises(NoCompression):
    """Its own bug shows in every round."""

    def compress(self, delta, rng, **kwargs):
        raise IndexError('my compressor broke')


def fedavg_with_old_aggregate(server_lr: float) -> Strategy:
    """A factory whose product's aggregate lacks the round index."""

    class OldFedAvg(FedAvg):
        def aggregate(self, global_weights, updates):
            return super().aggregate(0, global_weights, updates)

    return OldFedAvg(server_lr)


class NoisyFedAvg(FedAvg):
    """FedAvg plus noise drawn from numpy's global generator, not from its ``seed``."""

    def aggregate(self, round_index, global_weights, updates):
        result = super().aggregate(round_index, global_weights, updates)
        noisy = {n: (w + np.random.normal(0, 1e-2, w.shape)).astype(w.dtype)
                 for n, w in result.weights.items()}
        return AggregateResult(noisy, result.empty, result.metrics, result.used)


class StepsInPlace(FedAvg):
    """Adds the mean step to the global weights it is given, in place (``w += step``)."""

    def aggregate(self, round_index, global_weights, updates):
        result = super().aggregate(round_index, global_weights, updates)
        for name, w in global_weights.items():
            w += result.weights[name] - w
        return AggregateResult(dict(global_weights), False, result.metrics, result.used)


class MeanOfNothing(Strategy):
    """Averages whatever arrived, also nothing: fl_uav's weighted_mean_delta raises for it."""

    def aggregate(self, round_index, global_weights, updates):
        return weighted_mean_delta(updates, [u.num_samples for u in updates])


class StacksBadly(Strategy):
    """Hands numpy arrays of two shapes to np.stack: numpy raises, on the plug-in's line."""

    def aggregate(self, round_index, global_weights, updates):
        return np.stack([np.zeros(2), np.zeros(3)])   # the plug-in's faulty line


class SendsNaN(NoCompression):
    """A delta of NaN (a division by a zero norm), in a well-formed frame."""

    def compress(self, delta, rng, **kwargs):
        return super().compress({n: np.full_like(v, np.nan) for n, v in delta.items()}, rng,
                                **kwargs)


class SendsBeyondFloat32(NoCompression):
    """Its delta in a v1 float64 frame, one value finite in float64 but beyond float32."""

    def compress(self, delta, rng, *, round_index, sender, fingerprint, mask=None,
                 metadata=None, metrics=None):
        wide = {n: np.asarray(v, np.float64).copy() for n, v in delta.items()}
        next(iter(wide.values())).flat[0] = 1e300
        frame = encode_frame(FrameKind.UPDATE, round_index, sender, fingerprint, wide,
                             dict(metadata or {}))
        with np.errstate(over='ignore'):    # the reported delta: +inf there, as cast
            return frame, {n: v.astype(np.float32) for n, v in wide.items()}


class DrawsAsText(FedAvg):
    """FedAvg that sends FedDPQ's draws knob as text (a drone would reject it as malformed)."""

    def configure_round(self, round_index, drone_ids):
        return {d: {'draws': 'two'} for d in drone_ids}


class ConfigureRaises(FedAvg):
    """FedAvg whose per-drone knobs break (a key it forgot to set)."""

    def configure_round(self, round_index, drone_ids):
        raise KeyError('mu')
