// MetaJson.cs: parses a meta JSON object (SlotMeta.FromJson, and ReadMeta of a torn slot)
// from its UTF-8 bytes. Each known key sets the SlotMeta property of the same name in
// PascalCase; integers are parsed in place, floats correctly rounded.

using System;
using System.Globalization;
using System.Linq;
using System.Reflection;
using System.Text;

namespace Hydra.Progress
{
    internal static unsafe class MetaJson
    {
        // The keys the probe writes, in its order; the first fifteen are Hydra Core's, required.
        static readonly string[] KeyNames =
        {
            "slot_id", "n_past", "state_size", "is_processing", "model_alias", "tokenizer",
            "model_name", "model_quant", "model_capabilities", "model_path", "operation",
            "progress", "tokens_processed", "tokens_total", "elapsed_ms", "engine_id",
            "engine_liveness", "classification", "queued", "pending", "phase", "task_id",
            "work_unit", "work_done", "work_total", "last_progress_age_ms", "rate_per_s",
            "eta_s", "eta_source", "step_expected_ms", "prediction_error", "phase_start_ns", "phase_start_unix_ms", "step_age_ms", "step_size",
            "stall_threshold_ms", "finish_reason", "error_code", "n_ctx", "tokens_cached",
            "device", "heartbeat_age_ms", "read_error", "substep_done", "substep_total",
            "substep_age_ms", "stalled_at_layer", "wait_device", "wait_ms", "layer_device",
            "wait_learnt_max_ms", "wait_threshold_ms", "unread_peer", "unread_peer_ms",
            "unread_peer_threshold_ms",
        };
        // The first key of the layer fields: any of the three substep keys, null or not,
        // means the engine publishes layer positions.
        const int SubstepFields = 43;
        // The prediction fields (segment format v1.2): either key, null or not, means the
        // engine publishes predictions.
        const int PredictionFields = 29;
        // The device-wait fields (segment format v1.3): either key, null or not, means the
        // engine publishes device waits.
        const int WaitFields = 47;
        // The wait rule's figures (segment format v1.3): written, null or not, exactly when
        // the device-wait fields are.
        const int WaitRuleFields = 50;
        // The peer rule's fields (segment format v1.3): any of the three, null or not, means
        // the engine watches its peers' reads.
        const int PeerFields = 52;
        const int HydraFields = 15;

        static readonly byte[][] Keys = KeyNames.Select(k => Encoding.ASCII.GetBytes(k)).ToArray();

        // The SlotMeta property each key sets (slot_id: SlotId, n_past: NPast, ...).
        static readonly PropertyInfo[] Properties = KeyNames.Select(Property).ToArray();

        static PropertyInfo Property(string key)
        {
            string name = string.Concat(key.Split('_').Select(w => char.ToUpperInvariant(w[0]) + w.Substring(1)));
            return typeof(SlotMeta).GetProperty(name) ??
                   throw new InvalidOperationException($"SlotMeta has no property {name} for \"{key}\"");
        }

        static bool Same(byte* p, byte[] b)
        {
            for (int i = 0; i < b.Length; i++)
                if (p[i] != b[i])
                    return false;
            return true;
        }

        static readonly double[] Pow10 =
        {
            1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
            1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
        };

        static Exception Bad(string what, int at) =>
            new FormatException($"meta JSON: {what} at byte {at}");

        /// <summary>Parses one meta object; unknown keys are skipped, the Hydra fields required.</summary>
        public static SlotMeta Parse(byte* p, int len)
        {
            var m = new SlotMeta();
            int i = 0;
            uint seen = 0; // bits of the Hydra fields present
            SkipWs(p, len, ref i);
            Expect(p, len, ref i, (byte)'{');
            SkipWs(p, len, ref i);
            if (i < len && p[i] == (byte)'}')
                i++;
            else
            {
                while (true)
                {
                    SkipWs(p, len, ref i);
                    int keyStart, keyLen;
                    bool keyEscaped;
                    ReadString(p, len, ref i, out keyStart, out keyLen, out keyEscaped);
                    int field = Array.FindIndex(Keys, k => k.Length == keyLen && Same(p + keyStart, k));
                    SkipWs(p, len, ref i);
                    Expect(p, len, ref i, (byte)':');
                    SkipWs(p, len, ref i);
                    if (field < 0)
                        SkipValue(p, len, ref i, 0);
                    else
                    {
                        bool required = field < HydraFields;
                        Properties[field].SetValue(m, ReadValue(Properties[field].PropertyType, required, p, len, ref i));
                        if (required)
                            seen |= 1u << field;
                        if (field >= SubstepFields && field < SubstepFields + 3)
                            m.HasSubsteps = true;
                        if (field >= PredictionFields && field < PredictionFields + 2)
                            m.HasPredictions = true;
                        if ((field >= WaitFields && field < WaitFields + 2) || (field >= WaitRuleFields && field < WaitRuleFields + 2))
                            m.HasDeviceWaits = true;
                        if (field >= PeerFields && field < PeerFields + 3)
                            m.HasPeerReads = true;
                    }
                    SkipWs(p, len, ref i);
                    if (i < len && p[i] == (byte)',')
                    {
                        i++;
                        continue;
                    }
                    Expect(p, len, ref i, (byte)'}');
                    break;
                }
            }
            SkipWs(p, len, ref i);
            if (i != len)
                throw Bad("trailing characters", i);
            for (int f = 0; f < HydraFields; f++)
                if ((seen & (1u << f)) == 0)
                    throw new FormatException($"meta JSON: no \"{KeyNames[f]}\"");
            return m;
        }

        /// <summary>A value of the JSON type that a property of type <paramref name="type"/> holds.</summary>
        static object ReadValue(Type type, bool required, byte* p, int len, ref int i)
        {
            if (!required && IsNull(p, len, ref i))
                return null;
            Type t = Nullable.GetUnderlyingType(type) ?? type;
            if (t == typeof(ulong))
                return ReadUInt(p, len, ref i);
            if (t == typeof(int))
            {
                ulong v = ReadUInt(p, len, ref i);
                if (v > int.MaxValue)
                    throw Bad("integer out of range", i);
                return (int)v;
            }
            if (t == typeof(bool))
                return ReadBool(p, len, ref i);
            if (t == typeof(double))
                return ReadDouble(p, len, ref i);
            int start, n;
            bool escaped;
            ReadString(p, len, ref i, out start, out n, out escaped);
            string text = Decode(p + start, n, escaped);
            if (t == typeof(SlotClass))
                return Names.SlotClassNamed(text);
            if (t == typeof(EngineHealth))
                return Names.EngineHealthNamed(text);
            return text;
        }

        static void SkipWs(byte* p, int len, ref int i)
        {
            while (i < len && (p[i] == (byte)' ' || p[i] == (byte)'\n' || p[i] == (byte)'\r' || p[i] == (byte)'\t'))
                i++;
        }

        static void Expect(byte* p, int len, ref int i, byte c)
        {
            if (i >= len || p[i] != c)
                throw Bad($"expected '{(char)c}'", i);
            i++;
        }

        static bool IsNull(byte* p, int len, ref int i)
        {
            if (i + 4 <= len && p[i] == (byte)'n' && p[i + 1] == (byte)'u' && p[i + 2] == (byte)'l' && p[i + 3] == (byte)'l')
            {
                i += 4;
                return true;
            }
            return false;
        }

        /// <summary>The raw contents of a string (between its quotes), and whether it has escapes.</summary>
        static void ReadString(byte* p, int len, ref int i, out int start, out int length, out bool escaped)
        {
            Expect(p, len, ref i, (byte)'"');
            start = i;
            escaped = false;
            while (i < len)
            {
                byte c = p[i];
                if (c == (byte)'"')
                {
                    length = i - start;
                    i++;
                    return;
                }
                if (c == (byte)'\\')
                {
                    escaped = true;
                    i += 2;
                    continue;
                }
                if (c < 0x20)
                    throw Bad("control character in a string", i);
                i++;
            }
            throw Bad("unterminated string", start);
        }

        /// <summary>The string a JSON string's raw contents stand for.</summary>
        static string Decode(byte* raw, int len, bool escaped)
        {
            if (!escaped)
                return Encoding.UTF8.GetString(raw, len);
            var sb = new StringBuilder(len);
            int i = 0;
            while (i < len)
            {
                int run = i;
                while (i < len && raw[i] != (byte)'\\')
                    i++;
                if (i > run)
                    sb.Append(Encoding.UTF8.GetString(raw + run, i - run));
                if (i >= len)
                    break;
                if (i + 1 >= len)
                    throw Bad("dangling escape", i);
                byte c = raw[i + 1];
                i += 2;
                switch (c)
                {
                    case (byte)'"': sb.Append('"'); break;
                    case (byte)'\\': sb.Append('\\'); break;
                    case (byte)'/': sb.Append('/'); break;
                    case (byte)'b': sb.Append('\b'); break;
                    case (byte)'f': sb.Append('\f'); break;
                    case (byte)'n': sb.Append('\n'); break;
                    case (byte)'r': sb.Append('\r'); break;
                    case (byte)'t': sb.Append('\t'); break;
                    case (byte)'u':
                    {
                        if (i + 4 > len)
                            throw Bad("short \\u escape", i);
                        int v = 0;
                        for (int k = 0; k < 4; k++)
                        {
                            int d = HexDigit(raw[i + k]);
                            if (d < 0)
                                throw Bad("bad \\u escape", i);
                            v = v * 16 + d;
                        }
                        i += 4;
                        sb.Append((char)v); // surrogate pairs come as two escapes, appended in turn
                        break;
                    }
                    default:
                        throw Bad("unknown escape", i - 1);
                }
            }
            return sb.ToString();
        }

        static int HexDigit(byte c)
        {
            if (c >= (byte)'0' && c <= (byte)'9') return c - '0';
            if (c >= (byte)'a' && c <= (byte)'f') return c - 'a' + 10;
            if (c >= (byte)'A' && c <= (byte)'F') return c - 'A' + 10;
            return -1;
        }

        static bool ReadBool(byte* p, int len, ref int i)
        {
            if (i + 4 <= len && p[i] == (byte)'t' && p[i + 1] == (byte)'r' && p[i + 2] == (byte)'u' && p[i + 3] == (byte)'e')
            {
                i += 4;
                return true;
            }
            if (i + 5 <= len && p[i] == (byte)'f' && p[i + 1] == (byte)'a' && p[i + 2] == (byte)'l' && p[i + 3] == (byte)'s' && p[i + 4] == (byte)'e')
            {
                i += 5;
                return false;
            }
            throw Bad("expected true or false", i);
        }


        static ulong ReadUInt(byte* p, int len, ref int i)
        {
            int start = i;
            ulong v = 0;
            while (i < len && p[i] >= (byte)'0' && p[i] <= (byte)'9')
            {
                ulong d = (ulong)(p[i] - (byte)'0');
                if (v > (ulong.MaxValue - d) / 10)
                    throw Bad("integer out of range", start);
                v = v * 10 + d;
                i++;
            }
            if (i == start)
                throw Bad("expected an unsigned integer", start);
            if (i < len && (p[i] == (byte)'.' || p[i] == (byte)'e' || p[i] == (byte)'E'))
                throw Bad("expected an integer, not a float", start);
            return v;
        }


        /// <summary>
        /// A JSON number as a double, correctly rounded, in place for up to 19 significant
        /// digits and powers of ten within 10^±60 (every value the probe writes but extreme
        /// ones): exact when the digits fit a double and the power is small (Clinger's fast
        /// path), else refined by exact integer comparisons (Mono's double.Parse is not
        /// correctly rounded for 17 to 19 digits). Other numbers go through double.Parse.
        /// </summary>
        static double ReadDouble(byte* p, int len, ref int i)
        {
            int start = i;
            bool negative = false;
            if (i < len && p[i] == (byte)'-')
            {
                negative = true;
                i++;
            }
            ulong mantissa = 0;
            int digits = 0, scale = 0;
            bool exact = true, any = false;
            while (i < len && p[i] >= (byte)'0' && p[i] <= (byte)'9')
            {
                if (!Accumulate(p[i], ref mantissa, ref digits, ref exact))
                    scale++; // a digit beyond the mantissa: one more power of ten
                any = true;
                i++;
            }
            if (i < len && p[i] == (byte)'.')
            {
                i++;
                while (i < len && p[i] >= (byte)'0' && p[i] <= (byte)'9')
                {
                    if (Accumulate(p[i], ref mantissa, ref digits, ref exact))
                        scale--;
                    any = true;
                    i++;
                }
            }
            if (!any)
                throw Bad("expected a number", start);
            if (i < len && (p[i] == (byte)'e' || p[i] == (byte)'E'))
            {
                i++;
                bool expNegative = false;
                if (i < len && (p[i] == (byte)'-' || p[i] == (byte)'+'))
                {
                    expNegative = p[i] == (byte)'-';
                    i++;
                }
                int e = 0, expStart = i;
                while (i < len && p[i] >= (byte)'0' && p[i] <= (byte)'9')
                {
                    if (e < 100000)
                        e = e * 10 + (p[i] - '0');
                    i++;
                }
                if (i == expStart)
                    throw Bad("expected an exponent", expStart);
                scale += expNegative ? -e : e;
            }
            if (exact && scale >= -60 && scale <= 60)
            {
                double v = mantissa;
                if (scale >= -22 && scale <= 22)
                    v = scale < 0 ? v / Pow10[-scale] : v * Pow10[scale];
                else
                    v *= Math.Pow(10, scale);
                // Exact operands (mantissa <= 2^53, a power of ten of the table) give a correctly
                // rounded v; otherwise v is within a few ulps, and exact comparisons settle it.
                bool clinger = mantissa <= (1UL << 53) && scale >= -22 && scale <= 22;
                if (clinger || mantissa == 0 || Refine(mantissa, scale, ref v))
                    return negative ? -v : v;
            }
            string text = Encoding.ASCII.GetString(p + start, i - start);
            try
            {
                return double.Parse(text, NumberStyles.Float, CultureInfo.InvariantCulture);
            }
            catch (OverflowException)
            {
                throw Bad("number out of range", start);
            }
        }

        // ---- exact decimal-to-double rounding without allocating (for 16 to 19 digits) ----

        const int Limbs = 12; // 384-bit unsigned integers, 32-bit limbs, least significant first

        /// <summary>
        /// Moves <paramref name="v"/> (within a few ulps of w x 10^s) to the double nearest to
        /// w x 10^s, ties to even, by comparing w x 10^s exactly with the midpoints between
        /// neighbouring doubles. False when that needs more than 384 bits (the caller parses).
        /// </summary>
        static bool Refine(ulong w, int s, ref double v)
        {
            for (int step = 0; step < 8; step++)
            {
                if (double.IsInfinity(v) || v <= 0)
                    return false;
                long bits = BitConverter.DoubleToInt64Bits(v);
                double up = BitConverter.Int64BitsToDouble(bits + 1);
                if (double.IsInfinity(up))
                    return false;
                int c;
                if (!CompareToMidpoint(w, s, v, up, out c))
                    return false;
                if (c > 0) { v = up; continue; }
                if (c == 0) { v = (bits & 1) == 0 ? v : up; return true; }
                double down = BitConverter.Int64BitsToDouble(bits - 1);
                if (!CompareToMidpoint(w, s, down, v, out c))
                    return false;
                if (c < 0) { v = down; continue; }
                if (c == 0) { v = (bits & 1) == 0 ? v : down; return true; }
                return true;
            }
            return false;
        }

        static void Decompose(double x, out ulong m, out int e)
        {
            long bits = BitConverter.DoubleToInt64Bits(x);
            int biased = (int)((bits >> 52) & 0x7ff);
            ulong fraction = (ulong)bits & ((1UL << 52) - 1);
            m = biased == 0 ? fraction : fraction | (1UL << 52);
            e = biased == 0 ? -1074 : biased - 1075;
        }

        /// <summary>The sign of w x 10^s - (a + b) / 2, for adjacent positive doubles a &lt; b.</summary>
        static bool CompareToMidpoint(ulong w, int s, double a, double b, out int sign)
        {
            ulong ma, mb;
            int ea, eb;
            Decompose(a, out ma, out ea);
            Decompose(b, out mb, out eb);
            int e = Math.Min(ea, eb);
            // Adjacent doubles differ in exponent by at most 1: k < 2^56.
            ulong k = (ma << (ea - e)) + (mb << (eb - e));
            return Compare(w, s, k, e - 1, out sign);
        }

        /// <summary>The sign of w x 10^s - k x 2^f, exactly; false on overflow of 384 bits.</summary>
        static bool Compare(ulong w, int s, ulong k, int f, out int sign)
        {
            sign = 0;
            uint* l = stackalloc uint[Limbs];
            uint* r = stackalloc uint[Limbs];
            Set(l, w);
            Set(r, k);
            if (!(s >= 0 ? MulPow10(l, s) : MulPow10(r, -s)))
                return false;
            if (!(f >= 0 ? ShiftLeft(r, f) : ShiftLeft(l, -f)))
                return false;
            for (int i = Limbs - 1; i >= 0; i--)
            {
                if (l[i] != r[i])
                {
                    sign = l[i] > r[i] ? 1 : -1;
                    return true;
                }
            }
            return true;
        }

        static void Set(uint* x, ulong v)
        {
            for (int i = 0; i < Limbs; i++)
                x[i] = 0;
            x[0] = (uint)v;
            x[1] = (uint)(v >> 32);
        }

        static bool MulSmall(uint* x, uint factor)
        {
            ulong carry = 0;
            for (int i = 0; i < Limbs; i++)
            {
                ulong p = (ulong)x[i] * factor + carry;
                x[i] = (uint)p;
                carry = p >> 32;
            }
            return carry == 0;
        }

        static bool MulPow10(uint* x, int n)
        {
            for (; n >= 9; n -= 9)
                if (!MulSmall(x, 1000000000))
                    return false;
            uint rest = 1;
            for (; n > 0; n--)
                rest *= 10;
            return MulSmall(x, rest);
        }

        static bool ShiftLeft(uint* x, int n)
        {
            if (n >= Limbs * 32)
                return false;
            int words = n / 32, bitShift = n % 32;
            // Bits shifted out of the top mean overflow.
            for (int i = Limbs - words; i < Limbs; i++)
                if (x[i] != 0)
                    return false;
            if (bitShift > 0 && (x[Limbs - 1 - words] >> (32 - bitShift)) != 0)
                return false;
            for (int i = Limbs - 1; i >= 0; i--)
            {
                int src = i - words;
                uint hi = src >= 0 ? x[src] : 0;
                uint lo = src - 1 >= 0 ? x[src - 1] : 0;
                x[i] = bitShift == 0 ? hi : (hi << bitShift) | (lo >> (32 - bitShift));
            }
            return true;
        }

        /// <summary>
        /// Adds a digit to the mantissa (true), or leaves it out (false): a leading zero, or a
        /// digit past the 19 a ulong holds (a zero there keeps the value exact, another digit
        /// makes it inexact).
        /// </summary>
        static bool Accumulate(byte c, ref ulong mantissa, ref int digits, ref bool exact)
        {
            ulong d = (ulong)(c - (byte)'0');
            if (digits >= 19)
            {
                if (d != 0)
                    exact = false;
                return false;
            }
            mantissa = mantissa * 10 + d;
            if (mantissa != 0)
                digits++;
            return true;
        }


        /// <summary>Skips any JSON value (for fields this library does not know).</summary>
        static void SkipValue(byte* p, int len, ref int i, int depth)
        {
            if (depth > 64)
                throw Bad("nesting too deep", i);
            if (i >= len)
                throw Bad("expected a value", i);
            byte c = p[i];
            if (c == (byte)'"')
            {
                int s, n;
                bool e;
                ReadString(p, len, ref i, out s, out n, out e);
                return;
            }
            if (c == (byte)'{' || c == (byte)'[')
            {
                byte close = c == (byte)'{' ? (byte)'}' : (byte)']';
                i++;
                SkipWs(p, len, ref i);
                if (i < len && p[i] == close)
                {
                    i++;
                    return;
                }
                while (true)
                {
                    SkipWs(p, len, ref i);
                    if (c == (byte)'{')
                    {
                        int s, n;
                        bool e;
                        ReadString(p, len, ref i, out s, out n, out e);
                        SkipWs(p, len, ref i);
                        Expect(p, len, ref i, (byte)':');
                        SkipWs(p, len, ref i);
                    }
                    SkipValue(p, len, ref i, depth + 1);
                    SkipWs(p, len, ref i);
                    if (i < len && p[i] == (byte)',')
                    {
                        i++;
                        continue;
                    }
                    Expect(p, len, ref i, close);
                    return;
                }
            }
            if (IsNull(p, len, ref i))
                return;
            if (c == (byte)'t' || c == (byte)'f')
            {
                ReadBool(p, len, ref i);
                return;
            }
            ReadDouble(p, len, ref i);
        }
    }
}
