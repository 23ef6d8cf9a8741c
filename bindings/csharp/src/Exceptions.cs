// Exceptions.cs: every failure of the C ABI becomes one of these, carrying the C error code
// (HYDRA_PROBE_E_*), its name and the library's message. Nothing here crashes the host:
// the native library refuses bad input with a code, and these types report it.

using System;
using Hydra.Progress.Interop;

namespace Hydra.Progress
{
    /// <summary>A call into libhydra_probe_ffi failed; <see cref="Code"/> says how.</summary>
    public class HydraProbeException : Exception
    {
        /// <summary>The C error code (a negative <c>HYDRA_PROBE_E_*</c> value).</summary>
        public int Code { get; }

        /// <summary>The code's name, e.g. <c>HYDRA_PROBE_E_NOT_A_SEGMENT</c>.</summary>
        public string CodeName { get; }

        /// <summary>The native library's message for this failure.</summary>
        public string NativeMessage { get; }

        /// <summary>A failure of <paramref name="operation"/> with the native code and message.</summary>
        public HydraProbeException(string operation, int code, string codeName, string nativeMessage)
            : base(operation + ": " + nativeMessage + " (" + codeName + ")")
        {
            Code = code;
            CodeName = codeName;
            NativeMessage = nativeMessage;
        }

        /// <summary>The exception type for a code: the typed ones below, else this one.</summary>
        internal static HydraProbeException For(string operation, int code, string codeName, string message)
        {
            switch (code)
            {
                case HydraProbeAbi.ENotFound:
                    return new EngineNotFoundException(operation, code, codeName, message);
                case HydraProbeAbi.ENotASegment:
                case HydraProbeAbi.EUnsupportedVersion:
                case HydraProbeAbi.ERefused:
                    return new SegmentInvalidException(operation, code, codeName, message);
                case HydraProbeAbi.ESlotOutOfRange:
                    return new SlotOutOfRangeException(operation, code, codeName, message);
                default:
                    return new HydraProbeException(operation, code, codeName, message);
            }
        }
    }

    /// <summary>No such engine (or segment file): <c>HYDRA_PROBE_E_NOT_FOUND</c>.</summary>
    public class EngineNotFoundException : HydraProbeException
    {
        /// <summary>See <see cref="HydraProbeException"/>.</summary>
        public EngineNotFoundException(string operation, int code, string codeName, string nativeMessage)
            : base(operation, code, codeName, nativeMessage) { }
    }

    /// <summary>
    /// The file is not a segment this library may read: not a segment at all, truncated or
    /// inconsistent (<c>HYDRA_PROBE_E_NOT_A_SEGMENT</c>), another format major version
    /// (<c>HYDRA_PROBE_E_UNSUPPORTED_VERSION</c>), or refused for safety: a symbolic link,
    /// FIFO, socket, directory or a file of another owner (<c>HYDRA_PROBE_E_REFUSED</c>).
    /// </summary>
    public class SegmentInvalidException : HydraProbeException
    {
        /// <summary>See <see cref="HydraProbeException"/>.</summary>
        public SegmentInvalidException(string operation, int code, string codeName, string nativeMessage)
            : base(operation, code, codeName, nativeMessage) { }
    }

    /// <summary>The slot index is past the engine's slot count: <c>HYDRA_PROBE_E_SLOT_OUT_OF_RANGE</c>.</summary>
    public class SlotOutOfRangeException : HydraProbeException
    {
        /// <summary>See <see cref="HydraProbeException"/>.</summary>
        public SlotOutOfRangeException(string operation, int code, string codeName, string nativeMessage)
            : base(operation, code, codeName, nativeMessage) { }
    }

    /// <summary>
    /// libhydra_probe_ffi.so could not be loaded (the message lists every place tried), or it
    /// speaks another ABI version than these bindings.
    /// </summary>
    public class ProbeLibraryException : DllNotFoundException
    {
        /// <summary>A load failure described by <paramref name="message"/>.</summary>
        public ProbeLibraryException(string message) : base(message) { }
    }
}
