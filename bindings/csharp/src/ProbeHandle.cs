// ProbeHandle.cs: the native HydraProbe* in a SafeHandle, closed exactly once.

using System;
using Microsoft.Win32.SafeHandles;

namespace Hydra.Progress
{
    /// <summary>
    /// An open <c>HydraProbe*</c>. The runtime's reference counting keeps it open while a
    /// call uses it (DangerousAddRef/DangerousRelease), so <c>hydra_probe_close</c> runs once,
    /// after the last read in flight, however Dispose and reads interleave across threads.
    /// </summary>
    internal sealed class ProbeHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        public ProbeHandle() : base(true) { }

        internal void Set(IntPtr raw) => SetHandle(raw);

        protected override bool ReleaseHandle() =>
            NativeApi.Get().Close(handle) == Interop.HydraProbeAbi.Ok;
    }
}
