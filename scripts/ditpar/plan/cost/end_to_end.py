"""End-to-end time of one request: the DiT denoising loop plus the stages every plan runs once, in series.

The text encoder runs once per request on every rank and the VAE decodes the final latent once, on one
card unless the framework splits the decode over the cards ("VAE parallel", priced in
ditpar.plan.cost.vae_parallel). Neither depends on how the DiT is split, so they never change the order of plans
on one framework; they do set the speedup over one device (Amdahl), which stage is the wall, and where a measured
end-to-end latency should fall. Priced from the decoder's traffic in ditpar.plan.cost.serial / serial_time.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SerialStages:
    """Seconds of the serial stages of one request; None where the model file lacks what prices them."""

    text_encode_s: float | None
    vae_decode_s: float | None
    vae_devices: int = 1                       # cards the VAE decode is split over (1 = serial)
    notes: tuple[str, ...] = field(default_factory=tuple)
    vae_serial_s: float | None = None          # the decode on one card (vae_decode_s is it split over vae_devices)

    def split(self, vae_devices: int) -> SerialStages:
        """The same stages with the VAE decode split over `vae_devices` cards (1 = on one card)."""
        from ditpar.plan.cost.vae_parallel import split_decode_s

        one = self.vae_serial_s if self.vae_serial_s is not None else self.vae_decode_s
        n = max(1, int(vae_devices))
        vae = None if one is None else split_decode_s(one, n)
        return SerialStages(self.text_encode_s, vae, n, self.notes, one)

    @property
    def total_s(self) -> float:
        """Priced stages only (an unpriced one adds nothing and is named in `notes`)."""
        return (self.text_encode_s or 0.0) + (self.vae_decode_s or 0.0)

    @property
    def priced(self) -> bool:
        return self.text_encode_s is not None and self.vae_decode_s is not None


def serial_stages(model, hw, shape, vae_devices: int = 1) -> SerialStages:
    """Text encoding (the prompt, and the negative prompt under CFG) and the VAE decode of one sample on `hw`,
    the decode split evenly over `vae_devices` cards; a stage whose model data is missing is None, said in notes."""
    from ditpar.plan.cost import serial, serial_time

    notes = []
    prompts = 2 if shape.cfg else 1
    tokens = max(shape.text_joint, shape.text_cross, 1) * prompts
    try:
        text_s = serial_time.text_encode_s(serial.text_encode_flops(model, tokens), hw)
    except serial.NotPriced as exc:
        text_s = None
        notes.append(str(exc))
    try:
        vae_s = serial_time.predict_decode(model, hw, shape.width, shape.height, shape.frames).seconds
    except serial.NotPriced as exc:
        vae_s = None
        notes.append(str(exc))
    return SerialStages(text_s, vae_s, 1, tuple(notes), vae_s).split(vae_devices)


def dit_seconds(end_to_end_s: float, stages: SerialStages) -> float:
    """The DiT loop's share of a measured end-to-end time (what --ref-latency calibrates): the serial stages off."""
    from ditpar.errors import InputError

    if not end_to_end_s > stages.total_s:
        raise InputError(f"--ref-latency {end_to_end_s:g} s: expected more than the serial stages it holds "
                         f"({stages.total_s:.3g} s of text encoder and VAE decode; see the serial-stages line)")
    return end_to_end_s - stages.total_s
