"""The drones' side of a round in the engine: each drone's client algorithm and compressor
(made on first use; they hold its state), local training (all drones at once on the
vectorised trainer, or one after another), the loss traces an LGC planner measures from that
training (``resources.lgc_steps_scale`` auto / online), a poisoned drone's forged update
(``faults.*``), and encoding each upload as the fleet sends it (the frame bytes charged, the
delta the station decodes)."""

from __future__ import annotations

import numpy as np

from fl_uav.aggregation.robust import unwrapped
from fl_uav.aggregation.scaffold import Scaffold
from fl_uav.compression.compressor import Compressor, NoCompression, decode_update_frame
from fl_uav.compression.errors import FrameError, NonFiniteValues
from fl_uav.engine.faults import poison_result
from fl_uav.engine.results import ExperimentError, plugin_fault
from fl_uav.learning.client_algorithms import (
    LOCAL_STEPS_KNOB,
    SERVER_CONTROL_KNOB,
    ClientAlgorithm,
    ClientResult,
    local_steps_result,
)
from fl_uav.learning.pruning import pruned_training_model
from fl_uav.learning.training import NonFiniteLossError, TrainConfig, evaluate
from fl_uav.learning.vectorized import VectorizedTrainer, epoch_steps, first_diverging_client
from fl_uav.learning.weights import Weights, set_weights
from fl_uav.planning.feddpq_opt import BITS_KNOB
from fl_uav.planning.lgc_control import ENTRIES_KNOB
from fl_uav.planning.round_resources import STEPS_SCALE_EVAL_SAMPLES, STEPS_SCALE_SAMPLE_TAG
from fl_uav.plugins import is_plugin_spec, raised_at
from fl_uav.streams import Stream, stream_rng


class ClientsMixin:
    """ExperimentEngine's per-drone training and upload methods; its ``__init__`` sets what
    they use (config, out_dir, model, weights, shapes, fingerprint, strategy, resources, the
    shared compressor, _clients, _compressors, _worker, _trainer, _vectorized, _planned)."""

    def _client(self, drone: int) -> ClientAlgorithm:
        """Drone ``drone``'s client algorithm instance (it holds that drone's state)."""
        if drone not in self._clients:
            self._clients[drone] = self.config.learning.build_client()
        return self._clients[drone]

    def _compressor(self, drone: int) -> Compressor:
        """The shared compressor, or the drone's own when the method keeps state (lgc) or may
        (a plug-in)."""
        method = self.config.compression.method
        if method != 'lgc' and not is_plugin_spec(method):
            return self.compressor
        if drone not in self._compressors:
            self._compressors[drone] = self.config.compression.build()
        return self._compressors[drone]

    def _train_clients(self, r: int, active: list[int], client_data, seeds: list[int],
                       config: TrainConfig, knobs: dict[int, dict]) -> list[ClientResult]:
        """Run every active drone's client algorithm on this round's global model.

        With ``engine.vectorized``, a ``vectorizable`` client (sgd; osafl, with its random
        κ_u^t from ``vectorized_steps``) trains all drones at once (fl_uav.learning.vectorized);
        every other algorithm runs drone by drone on its instance.
        """
        if self._vectorized:
            steps = self._vectorized_steps(active, seeds, knobs, config,
                                           [len(labels) for _, labels in client_data])
            trace = ([len(labels) for _, labels in client_data] if self.resources.wants_trace(r)
                     else None)
            return self._train_vectorized(r, active, client_data, seeds, config, steps, trace,
                                          trace is not None and self.resources.online)
        shared = {}
        rule = unwrapped(self.strategy)    # clip_norm wraps it (by default)
        if isinstance(rule, Scaffold):     # c travels with the model (in process)
            shared[SERVER_CONTROL_KNOB] = rule.server_control(self.weights)
        results = []
        for k, (x, y), seed in zip(active, client_data, seeds):
            try:
                results.append(self._client(k).train(self._worker, self.weights, x, y, config,
                                                     seed, {**knobs.get(k, {}), **shared}))
            except NonFiniteLossError as exc:
                raise ExperimentError(f'round {r}, drone {k}: non-finite training loss ({exc});'
                                      f' partial results are in {self.out_dir}') from exc
        return results

    def _vectorized_steps(self, active: list[int], seeds: list[int], knobs: dict[int, dict],
                          config: TrainConfig, sizes: list[int]) -> list[int] | None:
        """Each drone's exact step count for the vectorized trainer: a planner's H (knob),
        else the client's own (OSAFL's κ_u^t); None when every drone takes its config's."""
        steps = [knobs.get(k, {}).get(LOCAL_STEPS_KNOB) for k in active]
        steps = [int(s) if s is not None else self._client(k).vectorized_steps(seed)
                 for k, s, seed in zip(active, steps, seeds)]
        if all(s is None for s in steps):
            return None
        # mixed: the others take the steps their epochs would (the same batches)
        return [s if s is not None else epoch_steps(config, n) for s, n in zip(steps, sizes)]

    def _trace_sample(self, client_data) -> tuple[np.ndarray, np.ndarray]:
        """The seeded sample of the drones' own training data the traces are evaluated on."""
        x = np.concatenate([x for x, _ in client_data])
        y = np.concatenate([y for _, y in client_data])
        rng = np.random.default_rng(np.random.SeedSequence([self.config.seed,
                                                            STEPS_SCALE_SAMPLE_TAG]))
        pick = np.sort(rng.choice(len(y), min(len(y), STEPS_SCALE_EVAL_SAMPLES), replace=False))
        return x[pick], y[pick]

    def _trace_losses(self, client_data) -> list[float]:
        """Training loss of the trainer's ``last_mean_trace`` models (the fleet's FedAvg after
        h = 0, 1, ... local steps) on a seeded sample of the drones' own training data: the
        warm-up's measurement for ``resources.lgc_steps_scale: auto``."""
        x, y = self._trace_sample(client_data)
        losses = []
        for weights in self._trainer.last_mean_trace:
            set_weights(self._worker, weights)
            losses.append(float(evaluate(self._worker, x, y)[1]))
        return losses

    def _compressed_trace_losses(self, active: list[int], client_data,
                                 knobs: dict[int, dict], probe: set[int]) -> list[float]:
        """``resources.lgc_steps_scale: online``'s measurement: the training loss (same sample
        as :meth:`_trace_losses`) of the model the LGC server would produce had the drones in
        ``probe`` stopped after h = 0, 1, ... local steps and the others taken all of theirs,
        w + η/M Σ_k Top_{K_k}(e_k + Δ_k(h_k)), with each drone's own error memory e_k and this
        round's entries K_k = Σ_n D_n (LGC Algorithm 1 lines 8-11 and 20-21, all layers
        delivered). At h = 0 the probe's drones send their memory alone."""
        from fl_uav.compression.lgc import top_k_indices
        from fl_uav.compression.quantization import flatten, unflatten

        x, y = self._trace_sample(client_data)
        start, layout = flatten(self.weights)
        names = layout.names
        scale = float(self.strategy.server_lr) / float(self.strategy.num_clients)
        traces = self._trainer.last_client_trace
        memories, ks = [], []
        for k in active:
            encoder = getattr(self._compressor(k), 'encoder', None)
            memories.append(np.zeros_like(start) if encoder is None else encoder.residual)
            ks.append(min(int(sum(knobs[k][ENTRIES_KNOB])), start.size))
        losses = []
        length = max(len(t) for t, k in zip(traces, active) if k in probe)
        for h in range(length):
            total = np.zeros_like(start)
            for trace, memory, k, drone in zip(traces, memories, ks, active):
                step = min(h, len(trace) - 1) if drone in probe else len(trace) - 1
                local, _ = flatten({n: trace[step][n] for n in names})
                u = memory + (local - start)
                idx = top_k_indices(u, k)
                total[idx] += u[idx]
            set_weights(self._worker, unflatten(start + scale * total, layout))
            losses.append(float(evaluate(self._worker, x, y)[1]))
        return losses

    def _train_vectorized(self, r: int, active: list[int], client_data, seeds: list[int],
                          config: TrainConfig, steps: list[int] | None = None,
                          trace_weights: list[int] | None = None,
                          trace_clients: bool = False) -> list[ClientResult]:
        """The sgd client (structured pruning included, with the same kept-coordinate mask
        as :class:`SgdClient`, so the upload is charged as the fleet sends it) or, with
        ``steps``, the osafl client for all drones at once. ``trace_weights``: also record
        the trainer's ``last_mean_trace`` (see :meth:`_trace_losses`)."""
        model, start, index_map = self.model, self.weights, None
        keep = self.config.learning.structured_keep
        if keep < 1.0:   # structured pruning: every drone trains this round's smaller model
            model, start, index_map = pruned_training_model(self.model, self.weights, keep)
        trainer = (self._trainer if index_map is None
                   else self.config.engine.build_trainer(model, config))
        trainer.config = config
        try:
            updates = trainer.train(start, client_data, seeds, steps=steps,
                                    trace_weights=trace_weights, trace_clients=trace_clients)
        except NonFiniteLossError as exc:
            drone = self._first_diverging_drone(trainer, start, active, client_data, seeds,
                                                steps)
            raise ExperimentError(f'round {r}, drone {drone}: non-finite training loss ({exc});'
                                  f' partial results are in {self.out_dir}') from exc
        return [local_steps_result(update, start, len(labels), keep, index_map, self.shapes)
                for (_, labels), update in zip(client_data, updates)]

    def _poisoned(self, drone: int, r: int, result: ClientResult) -> ClientResult:
        """``faults.poison``: the drone's round with its delta replaced by the forgery
        (fl_uav.engine.faults.poison_result)."""
        return poison_result(self.config.faults, self.config.seed, drone, r, result)

    def _compress(self, drone: int, r: int, result: ClientResult, knob: dict | None = None
                  ) -> tuple[int, Weights, list[int] | None]:
        """Encode one drone's update; returns (frame bytes sent, what the station decodes,
        bytes per LGC channel when a planner chose the entries, else None).

        Planner knobs: ``range_bits`` (FedDPQ's δ_u) picks that drone's range quantizer,
        ``lgc_channel_entries`` (LGC's D_n) that drone's layer sizes this round."""
        knob = knob or {}
        entries = knob.get(ENTRIES_KNOB)
        compressor = self._planned.select(self._compressor(drone), knob.get(BITS_KNOB), entries)
        plugin = is_plugin_spec(self.config.compression.method)
        if type(compressor) is NoCompression and result.mask is None:
            # A dense v1 frame carries the delta unchanged: charge its exact length unbuilt.
            return compressor.frame_size(result.delta), result.delta, None
        # a plug-in gets the tensors in the global model's order, as on a drone
        sent = {n: result.delta[n] for n in self.weights} if plugin else result.delta
        try:
            frame, delta = compressor.compress(
                sent, stream_rng(self.config.seed, r, Stream.COMPRESSOR, drone),
                round_index=r, sender=drone, fingerprint=self.fingerprint, mask=result.mask,
                metrics=result.metrics)
        except Exception as exc:
            if not plugin:   # a built-in's bug: its traceback
                raise
            raise plugin_fault(
                self.config, self.out_dir, f'round {r}, drone {drone}', 'compression.method',
                f'{type(compressor).__name__}.compress raised {type(exc).__name__}: {exc}'
                f'{raised_at(exc)}') from exc
        if plugin:   # aggregate what the station would decode from the frame, checked
            delta = self._plugin_frame_delta(drone, r, frame, delta)
        channel_bytes = None
        if entries is not None:   # an unused channel (0 entries) sends nothing
            channel_bytes = [n if e > 0 else 0
                             for n, e in zip(compressor.last_frame_bytes, entries)]
        return len(frame), delta, channel_bytes

    def _plugin_frame_delta(self, drone: int, r: int, frame: bytes,
                            reported: Weights) -> Weights:
        """The delta the station decodes from a plug-in compressor's frame; ExperimentError
        if the frame is not one update frame of this drone, round and model, or if it decodes
        to something else than the delta the compressor reported (its error feedback and
        the engine would then differ from the fleet)."""
        spec = self.config.compression.method
        where = f'round {r}, drone {drone}: compression.method {spec!r}'
        try:
            decoded = decode_update_frame(frame, self.weights, self.fingerprint)
        except NonFiniteValues as exc:   # a frame, but of a NaN or Inf delta
            raise ExperimentError(f'{where} returned a frame the station refuses ({exc.reason}:'
                                  f' {exc}); the delta it encodes must be finite') from None
        except FrameError as exc:
            raise ExperimentError(f'{where} returned bytes the station cannot decode '
                                  f'({exc.reason}: {exc}); a compressor returns one codec v1 '
                                  f'UPDATE or v2 QSGD/range/raw frame (see fl_uav.compression.'
                                  f'compressor.Compressor)') from None
        if (decoded.sender, decoded.round_index) != (drone, r):
            raise ExperimentError(f'{where} wrote sender {decoded.sender}, round '
                                  f'{decoded.round_index} into its frame; the station would '
                                  f'refuse it (it was given sender {drone}, round {r})')
        for name, value in decoded.delta.items():
            mine = np.asarray(reported.get(name, np.nan), np.float64)
            if mine.shape != value.shape or not np.allclose(mine, value, rtol=1e-6,
                                                            atol=1e-7):
                raise ExperimentError(f'{where} reported a delta that differs from what its '
                                      f'frame decodes to (tensor {name!r}); compress must '
                                      f'return (frame, the delta the frame decodes to)')
        return decoded.delta

    @staticmethod
    def _first_diverging_drone(trainer: VectorizedTrainer, start: Weights, active: list[int],
                               client_data, seeds: list[int], steps: list[int] | None
                               ) -> int | str:
        """Replay the round one drone at a time to name the drone whose loss diverged: the
        same trainer (this round's model, structurally pruned or not), start weights and
        per-drone step counts (OSAFL's κ_u^t, Algorithm 1 line 4) as the failed round."""
        drone = first_diverging_client(trainer, start, active, client_data, seeds, steps)
        return 'unknown' if drone is None else drone
