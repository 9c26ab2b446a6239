import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.Deque;

import org.agrona.MutableDirectBuffer;
import org.agrona.concurrent.UnsafeBuffer;

/**
 * Encodes messages with the SBE codecs generated into a jar, one per input line, and prints each as hex.
 *
 * A line is "<package>.<Message> token...": the encoder class is <package>.<Message>Encoder, wrapped with its
 * package's MessageHeaderEncoder at offset 0 of a zeroed buffer. Tokens, applied in order:
 *   name=value   call the one-argument setter "name" (value URL-encoded; enums by constant name)
 *   name:=hex    call "putName(byte[], 0, length)" with the bytes (var data without a character encoding)
 *   [name=count  call "nameCount(count)" and make the group encoder current
 *   +            call next() on the current group encoder
 *   ]            return to the enclosing encoder
 * Output, one line per input line: "<Message> <hex of header and body>".
 */
public final class SbeEncode
{
    public static void main(final String[] args) throws Exception
    {
        final BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        final UnsafeBuffer buffer = new UnsafeBuffer(new byte[1 << 16]);
        final StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null)
        {
            line = line.trim();
            if (line.isEmpty())
            {
                continue;
            }
            final String[] tokens = line.split(" ");
            final String message = tokens[0];
            final String pkg = message.substring(0, message.lastIndexOf('.'));
            buffer.setMemory(0, buffer.capacity(), (byte)0);
            final Class<?> encoderClass = Class.forName(message + "Encoder");
            final Class<?> headerClass = Class.forName(pkg + ".MessageHeaderEncoder");
            final Object encoder = encoderClass.getConstructor().newInstance();
            final Object header = headerClass.getConstructor().newInstance();
            encoderClass.getMethod("wrapAndApplyHeader", MutableDirectBuffer.class, int.class, headerClass)
                .invoke(encoder, buffer, 0, header);
            final Deque<Object> stack = new ArrayDeque<>();
            stack.push(encoder);
            for (int i = 1; i < tokens.length; i++)
            {
                final String token = tokens[i];
                final Object current = stack.peek();
                if (token.equals("+"))
                {
                    current.getClass().getMethod("next").invoke(current);
                }
                else if (token.equals("]"))
                {
                    stack.pop();
                }
                else if (token.startsWith("["))
                {
                    final String[] kv = token.substring(1).split("=", 2);
                    stack.push(current.getClass().getMethod(kv[0] + "Count", int.class)
                        .invoke(current, Integer.parseInt(kv[1])));
                }
                else if (token.contains(":="))
                {
                    final int at = token.indexOf(":=");
                    final String name = token.substring(0, at);
                    final byte[] bytes = hex(token.substring(at + 2));
                    current.getClass()
                        .getMethod("put" + Character.toUpperCase(name.charAt(0)) + name.substring(1),
                            byte[].class, int.class, int.class)
                        .invoke(current, bytes, 0, bytes.length);
                }
                else
                {
                    final int eq = token.indexOf('=');
                    set(current, token.substring(0, eq), URLDecoder.decode(token.substring(eq + 1), "UTF-8"));
                }
            }
            final int length = headerClass.getField("ENCODED_LENGTH").getInt(null) +
                (Integer)encoderClass.getMethod("encodedLength").invoke(encoder);
            out.append(message.substring(message.lastIndexOf('.') + 1)).append(' ');
            for (int i = 0; i < length; i++)
            {
                out.append(String.format("%02x", buffer.getByte(i) & 0xFF));
            }
            out.append('\n');
        }
        System.out.print(out);
        System.out.flush();
    }

    private static byte[] hex(final String text)
    {
        final byte[] bytes = new byte[text.length() / 2];
        for (int i = 0; i < bytes.length; i++)
        {
            bytes[i] = (byte)Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
        }
        return bytes;
    }

    @SuppressWarnings({ "unchecked", "rawtypes" })
    private static void set(final Object target, final String name, final String value) throws Exception
    {
        for (final Method method : target.getClass().getMethods())
        {
            if (!method.getName().equals(name) || method.getParameterCount() != 1 ||
                Modifier.isStatic(method.getModifiers()))
            {
                continue;
            }
            final Class<?> type = method.getParameterTypes()[0];
            final Object arg;
            if (type == long.class)
            {
                arg = value.startsWith("-") ? Long.parseLong(value) : Long.parseUnsignedLong(value);
            }
            else if (type == int.class)
            {
                arg = Integer.parseInt(value);
            }
            else if (type == short.class)
            {
                arg = Short.parseShort(value);
            }
            else if (type == byte.class)
            {
                arg = Byte.parseByte(value);
            }
            else if (type == double.class)
            {
                arg = Double.parseDouble(value);
            }
            else if (type == float.class)
            {
                arg = Float.parseFloat(value);
            }
            else if (type == String.class)
            {
                arg = value;
            }
            else if (type.isEnum())
            {
                arg = Enum.valueOf((Class)type, value);
            }
            else
            {
                continue;
            }
            method.invoke(target, arg);
            return;
        }
        throw new IllegalArgumentException("no setter " + name + " on " + target.getClass().getName());
    }
}
