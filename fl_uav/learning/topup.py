"""FedDPQ's per-class data top-up (Sec. III-A, eqs. (1)-(3)) with a pluggable generator.

FedDPQ tops every class of a device's local data up to a floor of Delta * D', where D' is the
count of the device's largest class and Delta its augmentation factor (Table I: [0.1, 0.4]):

* eq. (1): D_gen[c] = max(Delta * D' - D_loc[c], 0), with D' = max_c D_loc[c]  (``topup_counts``)
* eq. (2): D_mix[c] = D_loc[c] if D_loc[c] >= Delta * D', else D_loc[c] + D_gen[c]
  (``mixed_counts``)
* eq. (3): D_gen = sum_c D_gen[c]  (``TopUp.generated_total``)

Choices where the paper is silent (digest 001 §1.2 and §8):

* Rounding. Delta * D' need not be an integer; the floor is ``ceil(Delta * D')`` (with a 1e-9
  relative tolerance against float noise such as 0.1 * 3). Ceil keeps eqs. (1) and (2)
  consistent: a class is topped up exactly when D_loc[c] < Delta * D', and then reaches the floor.
* Every class 0..C-1 is topped up, including classes absent locally (D_loc[c] = 0), as in the
  paper. A generator may be unable to make a class it has no example of: the default
  augmentation generator is label-preserving, so it returns nothing for an absent class; the
  shortfall is reported (``TopUp.shortfall``), never filled with another class.
* The paper's generator is a pre-trained class-conditional diffusion model on the device. Here
  the generator is a plug-in (``Generator``: one method); the default is label-preserving image
  augmentation (``AugmentationGenerator``). A generative model implements the same method and
  is named in the engine's config as ``data.topup_generator: package.module:Name``
  (fl_uav.plugins; built with the :data:`GENERATOR_PLUGIN_ARGUMENTS` its signature names).
* Cost: FedDPQ charges generation once, per generated sample, on the device's CPU: eqs. (33)-(34)
  (T_gen = D_gen c0_gen / f, E_gen = varrho f^gamma T_gen), implemented in
  ``fl_uav.netmodel.compute`` (``CpuDevice.gen_time_s``, ``gen_energy_j``). Storage is not
  charged by the paper. With online data the rule has to be re-run when the data change
  (digest 001 §8, last item); callers decide when, and charge each run.

Call it with a buffer's arrays: ``top_up(*buffer.arrays(), num_classes, factor, generator, rng)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from fl_uav.configschema import require_choice
from fl_uav.plugins import PluginKind, build_plugin, is_plugin_spec, require_name_or_plugin

SAMPLE_LAYOUTS = ('hwc', 'chw')
TOPUP_SEED_TAG = 0x746F7075   # 'topu': keeps a top-up's random draws apart from other seeds
AUGMENTATION_GENERATORS = ('augment_dihedral', 'augment_hflip', 'augment_shift')
TOPUP_GENERATORS = ('auto', *AUGMENTATION_GENERATORS)
AUTO_GENERATOR_BY_DATASET = {
    'world': 'augment_dihedral',        # nadir aerial frames: every rotation/flip is plausible
    'fashion_mnist': 'augment_hflip',   # upright garments: a left-right flip only
    'image_folder': 'augment_hflip',
    'digits': 'augment_shift',          # flipped or rotated digits change meaning (6/9)
}
_RELATIVE_TOLERANCE = 1e-9
GENERATOR_PLUGIN_ARGUMENTS = ('layout', 'dataset')
"""The keyword arguments a generator plug-in's constructor (or factory) may take: ``layout``,
the per-sample axes of the images it is given ('chw': the engine's float32 C×H×W inputs in
[0, 1]; 'hwc': a buffer's uint8 H×W×3 frames), and ``dataset``, the ``data.dataset`` name.
Only the parameters its signature names are passed (all with ``**kwargs``)."""


def topup_ceiling(scaled: float | np.ndarray) -> np.ndarray:
    """ceil(Delta * D') of FedDPQ eqs. (1)-(2) for the given Delta * D' (scalar or array),
    with the 1e-9 relative tolerance against float noise (float64). The one rounding rule."""
    scaled = np.asarray(scaled, np.float64)
    return np.ceil(scaled - _RELATIVE_TOLERANCE * np.maximum(1.0, scaled))


def topup_floor(class_counts: np.ndarray, factor: float) -> int:
    """The per-class floor ceil(Delta * D') of FedDPQ eqs. (1)-(2); D' = max_c D_loc[c]."""
    counts = _check_counts(class_counts)
    _check_factor(factor)
    return int(topup_ceiling(factor * float(counts.max(initial=0))))


def topup_counts(class_counts: np.ndarray, factor: float) -> np.ndarray:
    """FedDPQ eq. (1): synthetic samples per class, max(ceil(Delta * D') - D_loc[c], 0) (int64).

    class_counts: D_loc[c], real samples per class (length C: absent classes count too).
    factor: Delta, the augmentation factor (> 0; FedDPQ Table I uses [0.1, 0.4]).
    """
    counts = _check_counts(class_counts)
    return np.maximum(topup_floor(counts, factor) - counts, 0)


def topup_counts_per_device(class_counts: np.ndarray, factors: np.ndarray,
                            absent_classes: bool = True) -> np.ndarray:
    """FedDPQ eq. (1) for U devices at once: row u is max(ceil(Delta_u D'_u) - D_loc,u,c, 0).

    class_counts: (U, C) real samples per class (float64 counts accepted, as a planner's
    expected counts). factors: (U,) Delta_u >= 0 (0: no top-up). absent_classes: whether the
    generator can make a class the device has no sample of (the paper's diffusion model can;
    a label-preserving augmentation cannot, see ``Generator.makes_absent_classes``); when
    False, classes with D_loc,u,c = 0 get 0. Returns (U, C) float64; on integer counts,
    Delta_u > 0 and ``absent_classes`` row u equals :func:`topup_counts`.
    """
    counts = np.asarray(class_counts, np.float64)
    floors = topup_ceiling(np.asarray(factors, np.float64) * counts.max(axis=1))
    wanted = np.maximum(floors[:, None] - counts, 0.0)
    return wanted if absent_classes else np.where(counts > 0, wanted, 0.0)


def mixed_counts(class_counts: np.ndarray, factor: float) -> np.ndarray:
    """FedDPQ eq. (2): samples per class in the mixed set D_mix = D_loc ∪ D_gen (int64)."""
    counts = _check_counts(class_counts)
    return counts + topup_counts(counts, factor)


def _check_counts(class_counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(class_counts, np.int64).reshape(-1)
    if np.any(counts < 0):
        raise ValueError(f'class counts must be >= 0, got {counts.tolist()}')
    return counts


def _check_factor(factor: float) -> None:
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f'data.topup_factor (FedDPQ Delta) must be > 0, got {factor}')


@runtime_checkable
class Generator(Protocol):
    """Makes labelled synthetic samples for FedDPQ's top-up (the paper: a diffusion model).

    A generator may also set ``makes_absent_classes`` (bool; read with a default of True, the
    paper's class-conditional model): False when it can only transform real samples of a class,
    so it makes nothing for a class the device lacks. Planners read it to predict what a top-up
    really adds (:func:`topup_counts_per_device`).

    A plug-in (``data.topup_generator: package.module:Name``) needs no base class, only this
    method. It holds no state that changes during a run: the engine calls it afresh every round
    with a per-drone ``rng`` and keeps nothing of it in a checkpoint, so a resumed run gets the
    same samples only from a generator whose output depends on its inputs and ``rng`` alone
    (weights of a generative model are loaded in its constructor, from a fixed file).
    """

    def generate(self, images: np.ndarray, labels: np.ndarray, counts_per_class: np.ndarray,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``counts_per_class[c]`` new samples of each class c (same sample shape and
        dtype as ``images``; labels int64), given the device's real (images, labels).
        Deterministic for a given ``rng`` state."""
        ...


@dataclass(frozen=True)
class AugmentationGenerator:
    """Label-preserving image augmentation (numpy only): the default top-up generator.

    Each synthetic sample of class c is a real sample of class c (sources are used in turns,
    in a random order) put through: one of the allowed dihedral transforms (``transforms``:
    'dihedral' = the 8 rotations by 90° and their mirror images, for nadir aerial frames, where
    north-up has no meaning; 'hflip' = identity or a left-right flip; 'none'), a shift by up to
    ``max_shift_fraction`` of the side (edge pixels repeated), and a brightness gain drawn
    uniformly in [1 - brightness_jitter, 1 + brightness_jitter], clipped to the real images'
    value range. Rotations by ±90° need square images; otherwise only 0° and 180° are used.

    layout: per-sample axes, 'hwc' (the onboard buffer's uint8 H×W×3 frames) or 'chw' (the
    engine's float32 C×H×W inputs); 2-D samples are H×W. Output shape and dtype equal the
    input's (uint8 rounded).
    """

    makes_absent_classes: ClassVar[bool] = False   # every output is a transformed real sample
    transforms: str = 'dihedral'
    max_shift_fraction: float = 0.1
    brightness_jitter: float = 0.1
    layout: str = 'hwc'

    def __post_init__(self) -> None:
        require_choice('transforms', self.transforms, ('dihedral', 'hflip', 'none'))
        require_choice('layout', self.layout, SAMPLE_LAYOUTS)
        if not 0.0 <= self.max_shift_fraction < 0.5 or not 0.0 <= self.brightness_jitter < 1.0:
            raise ValueError('max_shift_fraction must be in [0, 0.5) and brightness_jitter in '
                             '[0, 1)')

    def generate(self, images: np.ndarray, labels: np.ndarray, counts_per_class: np.ndarray,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """See ``Generator.generate``; classes without a real sample get none."""
        images = np.asarray(images)
        labels = np.asarray(labels, np.int64).reshape(-1)
        wanted = _check_counts(counts_per_class)
        if len(images) != len(labels):
            raise ValueError(f'{len(images)} images but {len(labels)} labels')
        sources, out_labels = [], []
        for c in np.flatnonzero(wanted):
            members = np.flatnonzero(labels == c)
            if len(members):
                turns = rng.permutation(members)
                sources.append(turns[np.arange(wanted[c]) % len(members)])
                out_labels.append(np.full(wanted[c], c, np.int64))
        if not sources:
            return images[:0].copy(), np.zeros(0, np.int64)
        source = np.concatenate(sources)
        return self._augment(images, images[source], rng), np.concatenate(out_labels)

    def _augment(self, reference: np.ndarray, batch: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
        x = self._to_nhwc(batch).astype(np.float32)
        n, height, width = x.shape[:3]
        transforms = {'dihedral': 8, 'hflip': 2, 'none': 1}[self.transforms]
        codes = rng.integers(0, transforms, n)
        if self.transforms == 'hflip':
            codes = codes * 4                       # code 4 = flip without rotation
        elif height != width:
            codes = codes - codes % 4 % 2           # quarter turns need a square image
        shift_px = round(self.max_shift_fraction * min(height, width))
        shift_y_px = rng.integers(-shift_px, shift_px + 1, n)
        shift_x_px = rng.integers(-shift_px, shift_px + 1, n)
        gains = rng.uniform(1.0 - self.brightness_jitter, 1.0 + self.brightness_jitter, n)
        for code in np.unique(codes):
            chosen = codes == code
            part = x[chosen][:, :, ::-1] if code >= 4 else x[chosen]
            x[chosen] = np.rot90(part, int(code % 4), axes=(1, 2))
        if shift_px:
            padded = np.pad(x, ((0, 0), (shift_px, shift_px), (shift_px, shift_px), (0, 0)),
                            mode='edge')
            rows = shift_px + shift_y_px[:, None] + np.arange(height)[None, :]
            cols = shift_px + shift_x_px[:, None] + np.arange(width)[None, :]
            x = padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
        low, high = float(reference.min()), float(reference.max())
        x = np.clip(x * gains[:, None, None, None].astype(np.float32), low, high)
        if np.issubdtype(batch.dtype, np.integer):
            x = np.rint(x)
        return self._from_nhwc(x, batch.shape).astype(batch.dtype)

    def _to_nhwc(self, batch: np.ndarray) -> np.ndarray:
        if batch.ndim == 3:
            return batch[..., None]
        if batch.ndim != 4:
            raise ValueError(f'samples must be 2-D or 3-D, got batch shape {batch.shape}')
        return batch.transpose(0, 2, 3, 1) if self.layout == 'chw' else batch

    def _from_nhwc(self, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        if len(shape) == 3:
            return x[..., 0]
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2) if self.layout == 'chw' else x)


GENERATOR_PLUGIN = PluginKind('data.topup_generator', Generator,
                              'fl_uav.learning.topup.Generator', GENERATOR_PLUGIN_ARGUMENTS,
                              requires=('generate',), calls=('generate',))


def check_generator_name(name: str) -> None:
    """``data.topup_generator`` is a built-in name or an importable Generator plug-in: a
    ValueError for an unknown name, a ConfigError saying what is wrong with a plug-in spec."""
    require_name_or_plugin(GENERATOR_PLUGIN, name, TOPUP_GENERATORS)


def build_generator(name: str, layout: str = 'hwc', dataset: str = '') -> Generator:
    """The generator called ``name`` (``data.topup_generator``); 'auto' picks by ``dataset``;
    a plug-in spec ``package.module:Name`` is built with the arguments it names."""
    if is_plugin_spec(name):
        return build_plugin(GENERATOR_PLUGIN, name, {'layout': layout, 'dataset': dataset})
    if name == 'auto':
        name = AUTO_GENERATOR_BY_DATASET.get(dataset, 'augment_hflip')
    if name not in AUGMENTATION_GENERATORS:
        raise ValueError(f'data.topup_generator {name!r} unknown; choices: '
                         f'{", ".join(TOPUP_GENERATORS)}')
    transforms = {'augment_dihedral': 'dihedral', 'augment_hflip': 'hflip',
                  'augment_shift': 'none'}[name]
    return AugmentationGenerator(transforms=transforms, layout=layout)


@dataclass(frozen=True)
class TopUp:
    """Result of ``top_up``: the synthetic samples and FedDPQ's counts."""

    images: np.ndarray
    labels: np.ndarray
    requested_per_class: np.ndarray     # eq. (1): D_gen[c]
    generated_per_class: np.ndarray     # what the generator made (<= requested)

    @property
    def generated_total(self) -> int:
        """Eq. (3): D_gen = sum_c D_gen[c], as generated (the count to charge, eqs. (33)-(34))."""
        return int(self.generated_per_class.sum())

    @property
    def shortfall(self) -> int:
        """Requested samples the generator could not make (e.g. absent classes)."""
        return int((self.requested_per_class - self.generated_per_class).sum())


def top_up(images: np.ndarray, labels: np.ndarray, num_classes: int, factor: float,
           generator: Generator, rng: np.random.Generator) -> TopUp:
    """FedDPQ eqs. (1)-(3) on one device's real (images, labels): the synthetic samples.

    The mixed set D_mix (eq. (2)) is ``images ∪ result.images``, ``labels ∪ result.labels``.
    """
    labels = np.asarray(labels, np.int64).reshape(-1)
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f'labels must be in [0, {num_classes})')
    requested = topup_counts(np.bincount(labels, minlength=num_classes), factor)
    made_images, made_labels = generator.generate(images, labels, requested, rng)
    made_labels = np.asarray(made_labels, np.int64).reshape(-1)
    generated = np.bincount(made_labels, minlength=num_classes)
    if len(made_images) != len(made_labels) or np.any(generated > requested):
        raise ValueError('the generator returned more samples than FedDPQ eq. (1) asks for, '
                         'or images and labels of different lengths')
    return TopUp(made_images, made_labels, requested, generated)
