package symbolize

import (
	"strings"
	"unicode/utf8"

	"github.com/ianlancetaylor/demangle"
)

// deviceStubPrefix starts the host-side stubs nvcc generates for kernels:
// "__device_stub__Z6kernelPf" is the stub of "_Z6kernelPf".
const deviceStubPrefix = "__device_stub_"

// Demangle returns the human-readable form of a C++ (Itanium ABI) or Rust
// symbol name. Other names, and names that fail to demangle, are returned
// unchanged. It never panics.
func Demangle(name string) (out string) {
	if rest, ok := strings.CutPrefix(name, deviceStubPrefix); ok && strings.HasPrefix(rest, "_Z") {
		if d := Demangle(rest); d != rest {
			return deviceStubPrefix + d
		}
		return name
	}
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name // fast path: C names
	}
	defer func() {
		if recover() != nil {
			out = name
		}
	}()
	// Bound the output: back-references let a short mangled name expand
	// exponentially.
	return demangle.Filter(name, demangle.MaxLength(17))
}

const ellipsis = "…"

// maxArgLen is the longest template argument Shorten keeps. It is generous
// because a long plain argument can be the most telling part of a name:
// cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>.
const maxArgLen = 64

// Shorten returns a display form of a demangled C++ name: the parameter
// list and return type are dropped, and in each template argument list only
// short, simple arguments are kept, the others collapsed to "…":
//
//	at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, ...)
//	→ at::native::vectorized_elementwise_kernel<4, …>
//
// If the result is still longer than max runes (max > 0), template
// argument lists are collapsed entirely ("<…>"), then leading scopes are
// dropped ("…::kernel<…>"), and as a last resort the name is truncated.
// A mangled name is demangled first. Shorten never panics.
func Shorten(name string, max int) (out string) {
	defer func() {
		if recover() != nil {
			out = truncate(name, max)
		}
	}()
	if strings.HasPrefix(name, "_Z") || strings.HasPrefix(name, "_R") || strings.HasPrefix(name, deviceStubPrefix) {
		name = Demangle(name)
	}
	prefix, s := splitSpecialPrefix(name)
	s = stripReturnType(stripParams(s))
	s = prefix + collapseTemplates(s, false)
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	s = collapseTemplates(s, true)
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	s = dropScopes(s, max)
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	return truncate(s, max)
}

// specialPrefixes are the descriptive prefixes the demangler puts before
// names of compiler-generated symbols.
var specialPrefixes = []string{
	"vtable for ", "VTT for ", "typeinfo for ", "typeinfo name for ",
	"construction vtable for ", "guard variable for ", "TLS init function for ",
	"TLS wrapper function for ", "transaction clone for ", "hidden alias for ",
	"non-virtual thunk to ", "virtual thunk to ", "covariant return thunk to ",
	deviceStubPrefix,
}

func splitSpecialPrefix(s string) (prefix, rest string) {
	for {
		found := false
		for _, p := range specialPrefixes {
			if strings.HasPrefix(s, p) {
				prefix, s, found = prefix+p, s[len(p):], true
			}
		}
		if !found {
			return prefix, s
		}
	}
}

func isIdent(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// operatorEnd returns the end of the operator name starting at s[i] if
// s[i:] is the keyword "operator" followed by an operator symbol, so that
// "operator<", "operator>>=", "operator()" or "operator[]" are not taken for
// brackets. Otherwise it returns -1.
func operatorEnd(s string, i int) int {
	const kw = "operator"
	if !strings.HasPrefix(s[i:], kw) || i > 0 && isIdent(s[i-1]) {
		return -1
	}
	j := i + len(kw)
	if j < len(s) && isIdent(s[j]) {
		return -1 // "operators", "operator_x": an identifier
	}
	if strings.HasPrefix(s[j:], "()") || strings.HasPrefix(s[j:], "[]") {
		return j + 2
	}
	for j < len(s) && strings.IndexByte("<>=!+-*/%^&|~,", s[j]) >= 0 {
		j++
	}
	return j
}

// matchClose returns the index just past the bracket closing the one at
// s[i] (one of "<([{"), or -1 if it is not closed. Inside (), [] and {},
// '<' and '>' are comparison operators, not brackets.
func matchClose(s string, i int) int {
	var stack []byte
	for j := i; j < len(s); j++ {
		if op := operatorEnd(s, j); op >= 0 {
			j = op - 1
			continue
		}
		c := s[j]
		angles := len(stack) == 0 || stack[len(stack)-1] == '>'
		switch c {
		case '(':
			stack = append(stack, ')')
		case '[':
			stack = append(stack, ']')
		case '{':
			stack = append(stack, '}')
		case '<':
			if angles {
				stack = append(stack, '>')
			}
		case '>', ')', ']', '}':
			if c == '>' && !angles {
				continue
			}
			if len(stack) == 0 || stack[len(stack)-1] != c {
				return -1
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return j + 1
			}
		}
	}
	return -1
}

// stripParams drops the function parameter list and whatever follows it
// (" const", " [clone .cold]", ...). Parenthesized groups that are part of
// the name are kept: "(anonymous namespace)", and the parameters of an
// enclosing function of a local entity, "f(int)::{lambda()#1}::operator()".
func stripParams(s string) string {
	for i := 0; i < len(s); {
		if op := operatorEnd(s, i); op >= 0 {
			i = op
			continue
		}
		switch c := s[i]; c {
		case '<', '[', '{', '(':
			if c == '[' && strings.HasPrefix(s[i:], "[clone ") {
				return strings.TrimRight(s[:i], " ")
			}
			j := matchClose(s, i)
			if j < 0 {
				return s
			}
			if c == '(' && i > 0 && strings.IndexByte(": ,(", s[i-1]) < 0 && !strings.HasPrefix(s[j:], "::") {
				return strings.TrimRight(s[:i], " ")
			}
			i = j
		default:
			i++
		}
	}
	return s
}

// stripReturnType drops a return type: "void ns::f<int>" → "ns::f<int>".
// It cuts at the last space outside brackets, but never inside the name of
// an operator ("ns::operator new", "A::operator unsigned long").
func stripReturnType(s string) string {
	cut := -1
	for i := 0; i < len(s); {
		if operatorEnd(s, i) >= 0 {
			break
		}
		switch c := s[i]; c {
		case '<', '[', '{', '(':
			j := matchClose(s, i)
			if j < 0 {
				return s
			}
			i = j
		case ' ':
			cut = i
			i++
		default:
			i++
		}
	}
	if cut < 0 {
		return s
	}
	return s[cut+1:]
}

// collapseTemplates rewrites every outermost template argument list: with
// all, to "<…>"; otherwise keeping its short, simple arguments and turning
// runs of the others into one "…".
func collapseTemplates(s string, all bool) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if op := operatorEnd(s, i); op >= 0 {
			b.WriteString(s[i:op])
			i = op
			continue
		}
		c := s[i]
		if strings.IndexByte("<([{", c) < 0 {
			b.WriteByte(c)
			i++
			continue
		}
		j := matchClose(s, i)
		if j < 0 {
			b.WriteString(s[i:])
			break
		}
		if c != '<' {
			b.WriteString(s[i:j])
		} else if all {
			b.WriteString("<" + ellipsis + ">")
		} else {
			b.WriteString("<" + collapseArgs(s[i+1:j-1]) + ">")
		}
		i = j
	}
	return b.String()
}

// collapseArgs shortens one template argument list (without its brackets).
func collapseArgs(inner string) string {
	var args []string
	add := func(a string) {
		a = strings.TrimSpace(a)
		if strings.ContainsAny(a, "<([{") || utf8.RuneCountInString(a) > maxArgLen {
			a = ellipsis
		}
		if a == ellipsis && len(args) > 0 && args[len(args)-1] == ellipsis {
			return
		}
		args = append(args, a)
	}
	start := 0
	for i := 0; i < len(inner); {
		if op := operatorEnd(inner, i); op >= 0 {
			i = op
			continue
		}
		switch c := inner[i]; c {
		case '<', '(', '[', '{':
			j := matchClose(inner, i)
			if j < 0 {
				return ellipsis
			}
			i = j
		case ',':
			add(inner[start:i])
			i++
			start = i
		default:
			i++
		}
	}
	add(inner[start:])
	return strings.Join(args, ", ")
}

// dropScopes removes leading "ns::" components, replacing them with "…::",
// until s fits in max runes or only the last component is left.
func dropScopes(s string, max int) string {
	var seps []int // indexes of top-level "::"
	for i := 0; i < len(s); {
		if op := operatorEnd(s, i); op >= 0 {
			i = op
			continue
		}
		switch c := s[i]; c {
		case '<', '(', '[', '{':
			j := matchClose(s, i)
			if j < 0 {
				i = len(s)
				break
			}
			i = j
		case ':':
			if strings.HasPrefix(s[i:], "::") {
				seps = append(seps, i)
				i += 2
				break
			}
			i++
		default:
			i++
		}
	}
	for _, sep := range seps {
		t := ellipsis + s[sep:]
		if utf8.RuneCountInString(t) <= max || sep == seps[len(seps)-1] {
			return t
		}
	}
	return s
}

// truncate cuts s to at most max runes, marking the cut with "…".
func truncate(s string, max int) string {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	n := 0
	for i := range s {
		if n == max-1 {
			return s[:i] + ellipsis
		}
		n++
	}
	return s
}
