//! The values of two CPU tensors as slices, for the engine's elementwise kernels that
//! replace a candle op on contiguous f32 data and leave every other case to candle.

use candle_core::{DType, Storage, Tensor};

/// `f` over the values of `a` and `b` when both are contiguous f32 tensors of one shape on
/// the CPU, as a tensor of that shape; `None` otherwise (the caller then runs candle's op).
pub(crate) fn on_cpu_slices(
    a: &Tensor,
    b: &Tensor,
    f: impl FnOnce(&[f32], &[f32]) -> Vec<f32>,
) -> candle_core::Result<Option<Tensor>> {
    if a.dims() != b.dims() || a.dtype() != DType::F32 || b.dtype() != DType::F32 {
        return Ok(None);
    }
    let n = a.elem_count();
    let (a_storage, a_layout) = a.storage_and_layout();
    let (b_storage, b_layout) = b.storage_and_layout();
    let (Storage::Cpu(a_cpu), Storage::Cpu(b_cpu)) = (&*a_storage, &*b_storage) else {
        return Ok(None);
    };
    if !a_layout.is_contiguous() || !b_layout.is_contiguous() {
        return Ok(None);
    }
    let (ao, bo) = (a_layout.start_offset(), b_layout.start_offset());
    let (Some(av), Some(bv)) = (
        a_cpu.as_slice::<f32>()?.get(ao..ao + n),
        b_cpu.as_slice::<f32>()?.get(bo..bo + n),
    ) else {
        return Ok(None);
    };
    let out = f(av, bv);
    Tensor::from_vec(out, a.shape(), a.device()).map(Some)
}
