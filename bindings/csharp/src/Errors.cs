// Errors.cs: turns a failed native call into its typed exception, with the code's name and
// this thread's message from hydra_probe_last_error.

using System;
using System.Runtime.InteropServices;
using System.Text;

namespace Hydra.Progress
{
    internal static unsafe class Errors
    {
        const int MessageCap = 2048;

        /// <summary>The exception for return code <paramref name="rc"/> of <paramref name="operation"/>.</summary>
        public static HydraProbeException Failure(NativeApi api, string operation, int rc)
        {
            IntPtr namePtr = api.ErrorName(rc);
            string name = namePtr == IntPtr.Zero ? rc.ToString() : Marshal.PtrToStringAnsi(namePtr);
            // The message is per thread and this call runs on the failing call's thread.
            byte* buf = stackalloc byte[MessageCap];
            UIntPtr needed;
            api.LastError(buf, (UIntPtr)MessageCap, &needed); // a longer message is truncated
            int len = 0;
            while (len < MessageCap && buf[len] != 0)
                len++;
            string message = Encoding.UTF8.GetString(buf, len);
            return HydraProbeException.For(operation, rc, name, message.Length == 0 ? name : message);
        }
    }
}
