package symbolize

import (
	"testing"
	"unicode/utf8"
)

const fillKernel = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"

func TestDemangle(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{fillKernel, "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"},
		{"_ZN2ns5twiceIiEET_S1_", "int ns::twice<int>(int)"},
		{"_ZZ3foovENKUliE_clEi", "foo()::{lambda(int)#1}::operator()(int) const"},
		{"__device_stub__Z6kernelPf", "__device_stub_kernel(float*)"},
		{"cudaLaunchKernel", "cudaLaunchKernel"},
		{"main", "main"},
		{"_Z", "_Z"},
		{"_Zgarbage!", "_Zgarbage!"},
		{"__device_stub__Zxx", "__device_stub__Zxx"},
		{"", ""},
	} {
		if got := Demangle(tc.in); got != tc.want {
			t.Errorf("Demangle(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestShorten(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", 0,
			"at::native::vectorized_elementwise_kernel<4, …>"},
		{fillKernel, 0, "at::native::vectorized_elementwise_kernel<4, …>"},
		{fillKernel, 45, "at::native::vectorized_elementwise_kernel<…>"},
		{fillKernel, 36, "…::vectorized_elementwise_kernel<…>"},
		{fillKernel, 20, "…::vectorized_eleme…"},
		{"int ns::twice<int>(int)", 0, "ns::twice<int>"},
		{"void f<float, 128u, c10::Half>(float*)", 0, "f<float, 128u, c10::Half>"},
		{"(anonymous namespace)::foo(int)", 0, "(anonymous namespace)::foo"},
		{"void (anonymous namespace)::bar<int>(int)", 0, "(anonymous namespace)::bar<int>"},
		{"foo()::{lambda(int)#1}::operator()(int) const", 0, "foo()::{lambda(int)#1}::operator()"},
		{"std::vector<int, std::allocator<int> >::push_back(int const&)", 0, "std::vector<int, …>::push_back"},
		{"bool operator< <int>(A<int> const&, A<int> const&)", 0, "operator< <int>"},
		{"A::operator<<(int)", 0, "A::operator<<"},
		{"A::operator->() const", 0, "A::operator->"},
		{"foo::operator new(unsigned long)", 0, "foo::operator new"},
		{"A::operator unsigned long() const", 0, "A::operator unsigned long"},
		{"std::string const& ns::name[abi:cxx11]() const", 0, "ns::name[abi:cxx11]"},
		{"foo(int) [clone .cold]", 0, "foo"},
		{"vtable for ns::Widget<std::vector<int, std::allocator<int> > >", 0, "vtable for ns::Widget<…>"},
		{"non-virtual thunk to ns::A::f(int)", 0, "non-virtual thunk to ns::A::f"},
		{"X<((3)>(4))>::f()", 0, "X<…>::f"},
		{"void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4::Params)", 0,
			"cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>"},
		{"void k<aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, 1>()", 0, "k<…, 1>"},
		{"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)", 0,
			"at::native::reduce_kernel<512, 1, …>"},
		{"cudaLaunchKernel", 0, "cudaLaunchKernel"},
		{"cudaLaunchKernel", 5, "cuda…"},
		{"unbalanced<a, b(", 0, "unbalanced<a, b("},
		{"", 0, ""},
	} {
		if got := Shorten(tc.in, tc.max); got != tc.want {
			t.Errorf("Shorten(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

func FuzzDemangle(f *testing.F) {
	for _, s := range []string{
		fillKernel, "_ZN2ns5twiceIiEET_S1_", "_ZZ3foovENKUliE_clEi", "__device_stub__Z6kernelPf",
		"_ZltIiEbRK1AIT_ES4_", "_ZNSt6vectorIiSaIiEE9push_backERKi", "_RNvCs1234_7mycrate3foo",
		"foo()::{lambda(int)#1}::operator()(int) const", "operator<<<", "a<b<c>>(d)::e", "vtable for x",
		"_Z1fIJEEvDpT_", "_ZSt4moveIRSt6vectorIiSaIiEEEONSt16remove_referenceIT_E4typeEOS5_",
	} {
		f.Add(s, 0)
		f.Add(s, 10)
	}
	f.Fuzz(func(t *testing.T, name string, max int) {
		d := Demangle(name)
		s := Shorten(name, max)
		s2 := Shorten(d, max)
		if max > 0 {
			for _, x := range []string{s, s2} {
				if utf8.RuneCountInString(x) > max {
					t.Errorf("Shorten(%q, %d) = %q, longer than max", name, max, x)
				}
			}
		}
	})
}
