// JsonWriter.cs: writes one JSON object the way serde_json does, so that the C# meta and the
// Rust meta are the same bytes: no spaces, serde_json's string escapes, and floats in the
// shortest form that reads back to the same double, laid out as serde_json's float writer
// (the zmij crate) does.

using System;
using System.Globalization;
using System.Numerics;
using System.Text;

namespace Hydra.Progress
{
    internal struct JsonWriter
    {
        readonly StringBuilder sb;
        bool first;

        public JsonWriter(StringBuilder sb)
        {
            this.sb = sb;
            first = true;
        }

        public void Begin() => sb.Append('{');

        public string End() => sb.Append('}').ToString();

        void Key(string name)
        {
            if (!first)
                sb.Append(',');
            first = false;
            sb.Append('"').Append(name).Append("\":");
        }

        public void Field(string name, ulong v)
        {
            Key(name);
            sb.Append(v.ToString(CultureInfo.InvariantCulture));
        }

        public void Field(string name, bool v)
        {
            Key(name);
            sb.Append(v ? "true" : "false");
        }

        public void Field(string name, double v)
        {
            Key(name);
            sb.Append(FloatFormat.Shortest(v));
        }

        public void Field(string name, string v)
        {
            Key(name);
            String(sb, v ?? "");
        }

        /// <summary>Written when set, left out when null.</summary>
        public void Optional(string name, string v)
        {
            if (v != null)
                Field(name, v);
        }

        /// <summary>Written when set, left out when null.</summary>
        public void Optional(string name, ulong? v)
        {
            if (v.HasValue)
                Field(name, v.Value);
        }

        /// <summary>Written as the value or as null.</summary>
        public void Nullable(string name, ulong? v)
        {
            if (v.HasValue)
                Field(name, v.Value);
            else
                Null(name);
        }

        /// <summary>Written as the value or as null.</summary>
        public void Nullable(string name, string v)
        {
            if (v != null)
                Field(name, v);
            else
                Null(name);
        }

        /// <summary>Written as the value or as null.</summary>
        public void Nullable(string name, double? v)
        {
            if (v.HasValue)
                Field(name, v.Value);
            else
                Null(name);
        }

        void Null(string name)
        {
            Key(name);
            sb.Append("null");
        }

        const string Hex = "0123456789abcdef";

        /// <summary>A JSON string with serde_json's escapes (\" \\ \b \f \n \r \t, \u00xx for other controls).</summary>
        static void String(StringBuilder sb, string s)
        {
            sb.Append('"');
            foreach (char c in s)
            {
                switch (c)
                {
                    case '"': sb.Append("\\\""); break;
                    case '\\': sb.Append("\\\\"); break;
                    case '\b': sb.Append("\\b"); break;
                    case '\f': sb.Append("\\f"); break;
                    case '\n': sb.Append("\\n"); break;
                    case '\r': sb.Append("\\r"); break;
                    case '\t': sb.Append("\\t"); break;
                    default:
                        if (c < 0x20)
                            sb.Append("\\u00").Append(Hex[c >> 4]).Append(Hex[c & 0xf]);
                        else
                            sb.Append(c);
                        break;
                }
            }
            sb.Append('"');
        }
    }

    /// <summary>Float text as Rust's serde_json writes it (through the zmij crate).</summary>
    public static class FloatFormat
    {
        /// <summary>
        /// The shortest decimal that reads back as <paramref name="v"/>, laid out as serde_json
        /// does: "0.25", "1.0", "12340000000.0", "0.00001234", "1e-7", "1.234e+33". Not
        /// finite: "null" (serde_json's choice; the probe never writes one).
        /// </summary>
        public static string Shortest(double v)
        {
            if (double.IsNaN(v) || double.IsInfinity(v))
                return "null";
            if (v == 0)
                return (1 / v < 0) ? "-0.0" : "0.0";
            string digits;
            int exp10; // v = 0.digits x 10^exp10 ... stated below as digits x 10^(kk - len)
            ShortestDigits(Math.Abs(v), out digits, out exp10);
            var sb = new StringBuilder(32);
            if (v < 0)
                sb.Append('-');
            int length = digits.Length;
            int kk = exp10;           // 10^(kk-1) <= |v| < 10^kk
            int k = kk - length;      // |v| = digits x 10^k
            if (0 <= k && kk <= 16)
            {
                sb.Append(digits).Append('0', k).Append(".0");
            }
            else if (0 < kk && kk <= 16)
            {
                sb.Append(digits, 0, kk).Append('.').Append(digits, kk, length - kk);
            }
            else if (-5 < kk && kk <= 0)
            {
                sb.Append("0.").Append('0', -kk).Append(digits);
            }
            else if (length == 1)
            {
                sb.Append(digits).Append(Exponent(kk - 1));
            }
            else
            {
                sb.Append(digits[0]).Append('.').Append(digits, 1, length - 1).Append(Exponent(kk - 1));
            }
            return sb.ToString();
        }

        /// <summary>"e-7", "e+33": the sign always written, no leading zeros.</summary>
        static string Exponent(int e) =>
            (e < 0 ? "e-" : "e+") + Math.Abs(e).ToString(CultureInfo.InvariantCulture);

        /// <summary>
        /// The fewest significant digits (no trailing zeros) that read back as v, the closest
        /// to v among those of that length (ties to even), and kk with 10^(kk-1) &lt;= v &lt; 10^kk,
        /// for a finite v &gt; 0: what serde_json's float writer computes, here with exact integer arithmetic.
        /// </summary>
        static void ShortestDigits(double v, out string digits, out int kk)
        {
            long bits = BitConverter.DoubleToInt64Bits(v);
            int biased = (int)((bits >> 52) & 0x7ff);
            long fraction = bits & ((1L << 52) - 1);
            long m = biased == 0 ? fraction : fraction | (1L << 52);
            int e = biased == 0 ? -1074 : biased - 1075; // v = m x 2^e
            // In units of 2^(e-2): v = 4m, the round-trip interval is v - lo .. v + 2, with
            // lo = 1 at a power of two (the gap below is half the gap above), else 2. Its
            // bounds read back as v when m is even (round half to even).
            bool lowerNarrow = fraction == 0 && biased > 1;
            bool inclusive = (m & 1) == 0;
            int k10 = (int)Math.Floor(Math.Log10(v)); // an estimate, made exact:
            while (k10 > -400 && Compare(m, e, k10) < 0)
                k10--;                                 // 10^k10 <= v
            while (k10 < 400 && Compare(m, e, k10 + 1) >= 0)
                k10++;                                 // v < 10^(k10+1)
            for (int p = 1; p <= 17; p++)
            {
                int q = k10 + 1 - p; // candidates D x 10^q with p digits
                // Everything times 2^max(0, 2-e) x 10^max(0, -q), so that all are integers.
                BigInteger scale2 = BigInteger.Pow(2, Math.Max(0, 2 - e));
                BigInteger scale10 = BigInteger.Pow(10, Math.Max(0, -q));
                BigInteger unit = BigInteger.Pow(2, Math.Max(0, e - 2)) * scale10; // 2^(e-2), scaled
                BigInteger value = 4 * (BigInteger)m * unit;
                BigInteger ten = BigInteger.Pow(10, Math.Max(0, q)) * scale2;     // 10^q, scaled
                BigInteger hi = 2 * unit, lo = (lowerNarrow ? 1 : 2) * unit;
                BigInteger rem;
                BigInteger d = BigInteger.DivRem(value, ten, out rem);
                if (2 * rem > ten || (2 * rem == ten && !d.IsEven))
                    d += 1;
                BigInteger best = BigInteger.MinusOne, bestDistance = BigInteger.Zero;
                for (int delta = -1; delta <= 1; delta++)
                {
                    BigInteger c = d + delta;
                    if (c.Sign <= 0)
                        continue;
                    BigInteger diff = c * ten - value;
                    BigInteger bound = diff.Sign >= 0 ? hi : lo;
                    BigInteger distance = BigInteger.Abs(diff);
                    bool inside = distance < bound || (inclusive && distance == bound);
                    if (!inside)
                        continue;
                    if (best.Sign < 0 || distance < bestDistance || (distance == bestDistance && c.IsEven))
                    {
                        best = c;
                        bestDistance = distance;
                    }
                }
                if (best.Sign < 0)
                    continue;
                string s = best.ToString(CultureInfo.InvariantCulture);
                kk = s.Length + q;
                digits = s.TrimEnd('0');
                return;
            }
            throw new InvalidOperationException("unreachable: 17 digits always read back");
        }

        /// <summary>The sign of m x 2^e - 10^k, exactly.</summary>
        static int Compare(long m, int e, int k)
        {
            BigInteger left = (BigInteger)m * BigInteger.Pow(2, Math.Max(e, 0)) * BigInteger.Pow(10, Math.Max(-k, 0));
            BigInteger right = BigInteger.Pow(10, Math.Max(k, 0)) * BigInteger.Pow(2, Math.Max(-e, 0));
            return left.CompareTo(right);
        }
    }
}
