"""``compression.*``: which compressor a drone builds (a built-in name or a plug-in), and
the one it uses in a round with a resource planner's knobs. The compressors themselves are
fl_uav.compression.compressor (the base and the generic ones) and
fl_uav.compression.paper_compressors (2CEOAFL's and LGC's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fl_uav.compression.compressor import (
    Compressor,
    NoCompression,
    QsgdCompressor,
    RangeCompressor,
    check_lgc_entries,
)
from fl_uav.compression.paper_compressors import CeoaflCompressor, LgcCompressor
from fl_uav.plugins import PluginKind, build_plugin, is_plugin_spec, require_name_or_plugin

COMPRESSION_METHODS = ('none', 'qsgd', 'range', 'ceoafl', 'lgc')
COMPRESSOR_PLUGIN_ARGUMENTS = ('qsgd_levels', 'range_bits', 'per_layer', 'raw_probability',
                               'lgc_channel_entries', 'lgc_drop_probabilities')
"""The keyword arguments a compressor plug-in's constructor (or factory) may take: the
``compression.*`` keys of the same names (tuples for the lists). Only the parameters its
signature names are passed (all with ``**kwargs``)."""


@dataclass(frozen=True)
class CompressionConfig:
    """How drones compress their update (config section ``compression``, shared by the fleet
    and the engine): method none | qsgd (2CEOAFL eq. (12), qsgd_levels levels) | range (FedDPQ
    eqs. (11)-(13), range_bits bits) | ceoafl (2CEOAFL eq. (11): raw with probability
    raw_probability, else QSGD with qsgd_levels; raw_probability -1 = the drone's pruning ratio
    δ_u^t, the paper's q = δ) | lgc (LGC eqs. (1)-(2): layered top-k with error feedback,
    lgc_channel_entries[c] entries on channel c, which drops its layer with probability
    lgc_drop_probabilities[c] per round; empty = never); per_layer: one norm or range per
    tensor instead of one for the whole update. Uplink bytes are the sent frames' length.
    method may also be a plug-in ``package.module:Name`` (a :class:`Compressor`, built with
    the :data:`COMPRESSOR_PLUGIN_ARGUMENTS` it names; fl_uav.plugins).

    method: how each drone compresses its update (none = sent uncompressed).
    qsgd_levels (methods qsgd, ceoafl): QSGD's s, magnitudes quantised to multiples of 1/s of
        the norm.
    range_bits (method range): bits per entry of the range quantizer.
    raw_probability (method ceoafl): probability that a drone sends its update raw instead of
        QSGD-quantised (-1 = the drone's pruning ratio δ_u^t).
    lgc_channel_entries (method lgc): top-k entries sent on each channel, one count per channel.
    lgc_drop_probabilities (method lgc): per channel, the probability that it drops its layer
        in a round (empty = never).
    """

    method: str = 'none'
    qsgd_levels: int = 3
    range_bits: int = 4
    per_layer: bool = False
    raw_probability: float = -1.0
    lgc_channel_entries: tuple[int, ...] = (1000, 4000, 15000)
    lgc_drop_probabilities: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        check_compression_method(self.method)   # a built-in name or a plug-in module:Name
        if self.qsgd_levels < 1 or not 1 <= self.range_bits <= 16:
            raise ValueError('qsgd_levels must be >= 1 and range_bits in [1, 16]')
        if self.raw_probability != -1.0 and not 0.0 <= self.raw_probability <= 1.0:
            raise ValueError(f'raw_probability must be -1 (= the pruning ratio) or in [0, 1], '
                             f'got {self.raw_probability}')
        entries, drops = self.lgc_channel_entries, self.lgc_drop_probabilities
        if not entries or any(k < 0 for k in entries) or sum(entries) < 1:
            raise ValueError(f'lgc_channel_entries must be entry counts >= 0 with a positive '
                             f'sum, got {list(entries)}')
        if drops and (len(drops) != len(entries) or any(not 0 <= p <= 1 for p in drops)):
            raise ValueError(f'lgc_drop_probabilities needs one probability in [0, 1] per '
                             f'channel ({len(entries)}), got {list(drops)}')

    @property
    def frames_per_update(self) -> int:
        """The most frames one update travels in: one per LGC channel (a layer each), else
        one."""
        return len(self.lgc_channel_entries) if self.method == 'lgc' else 1

    def check_model_dim(self, dim: int) -> None:
        """Fail at start if the configured method cannot compress a model of ``dim`` entries
        (lgc: the channels' layers must fit in the model, LGC eqs. (1)-(2)). The fleet's
        DroneAgent and the experiment engine call it when they build their model."""
        if self.method == 'lgc':
            check_lgc_entries(self.lgc_channel_entries, dim)

    def build(self) -> Compressor:
        """The configured compressor (a stateful one, lgc, needs one instance per drone)."""
        return build_compressor(self.method, self.qsgd_levels, self.range_bits, self.per_layer,
                                raw_probability=self.raw_probability,
                                lgc_channel_entries=self.lgc_channel_entries,
                                lgc_drop_probabilities=self.lgc_drop_probabilities)


COMPRESSOR_PLUGIN = PluginKind('compression.method', Compressor,
                               'fl_uav.compression.compressor.Compressor',
                               COMPRESSOR_PLUGIN_ARGUMENTS,
                               calls=('compress', 'upload_lost', 'state_dict',
                                      'load_state_dict'))


def check_compression_method(method: str) -> None:
    """``compression.method`` is a built-in name or an importable Compressor plug-in: a
    ValueError for an unknown name, a ConfigError saying what is wrong with a plug-in spec."""
    require_name_or_plugin(COMPRESSOR_PLUGIN, method, COMPRESSION_METHODS, choice_key='method')



def build_compressor(method: str, qsgd_levels: int = 3, range_bits: int = 4,
                     per_layer: bool = False, *, raw_probability: float = -1.0,
                     lgc_channel_entries: tuple[int, ...] = (1000, 4000, 15000),
                     lgc_drop_probabilities: tuple[float, ...] = ()) -> Compressor:
    """The compressor a config names (a built-in name or a plug-in spec)."""
    if is_plugin_spec(method):
        return build_plugin(COMPRESSOR_PLUGIN, method, {
            'qsgd_levels': qsgd_levels, 'range_bits': range_bits, 'per_layer': per_layer,
            'raw_probability': raw_probability,
            'lgc_channel_entries': tuple(lgc_channel_entries),
            'lgc_drop_probabilities': tuple(lgc_drop_probabilities)})
    if method in ('ceoafl', 'lgc'):   # the papers' own schemes
        if method == 'ceoafl':
            return CeoaflCompressor(qsgd_levels,
                                    None if raw_probability == -1.0 else raw_probability)
        return LgcCompressor(lgc_channel_entries, lgc_drop_probabilities)
    if method == 'none':
        return NoCompression()
    if method == 'qsgd':
        return QsgdCompressor(qsgd_levels, per_layer)
    if method == 'range':
        return RangeCompressor(range_bits, per_layer)
    raise ValueError(f'unknown compression method {method!r}; choices: '
                     f'{", ".join(COMPRESSION_METHODS)}')


class PlannedCompressors:
    """The compressor a drone uses in a round with a resource planner's knobs (the engine and
    the fleet's drone alike): FedDPQ's δ_u (``bits``, eqs. (11)-(13)) selects a range quantizer
    of that many bits when the method is ``range`` (one kept per bit width); LGC's D_n
    (``channel_entries``, LGC eq. (13)) sets the LGC layer sizes this round, else the config's.
    """

    def __init__(self, config: CompressionConfig) -> None:
        self._config = config
        self._range: dict[int, RangeCompressor] = {}

    def select(self, base: Compressor, bits: int | None = None,
               channel_entries: Sequence[int] | None = None) -> Compressor:
        compressor = base
        if bits is not None and self._config.method == 'range':
            bits = int(bits)
            if bits not in self._range:
                self._range[bits] = RangeCompressor(bits, self._config.per_layer)
            compressor = self._range[bits]
        if isinstance(compressor, LgcCompressor):
            entries = (self._config.lgc_channel_entries if channel_entries is None
                       else channel_entries)
            compressor.channel_entries = tuple(int(e) for e in entries)
        return compressor
