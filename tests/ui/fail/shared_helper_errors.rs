// `#[tilus::helpers]`: misuse is reported at the module or attribute, and a mistake inside a
// shared helper at the helper's own tokens.
#[tilus::helpers(verbose)]
mod with_arguments {
    #[helper]
    fn one(t: Tensor) -> Tensor {
        t
    }
    #[tilus::kernel(grid = [1], warps = 1)]
    fn k(a: Global<f32>) {}
}

#[tilus::helpers]
mod no_helpers {
    #[tilus::kernel(grid = [1], warps = 1)]
    fn k(a: Global<f32>) {}
}

#[tilus::helpers]
mod no_kernels {
    #[helper]
    fn one(t: Tensor) -> Tensor {
        t
    }
}

#[tilus::helpers]
mod wrong_helper {
    #[helper]
    fn twice(t: Tensor) -> Tensor {
        t + undefined
    }
    #[tilus::kernel(grid = [1], warps = 1)]
    fn k(a: Global<f32>) {
        let r = load_global(view_global(a, [32]), layout!(spatial(32)), [0]);
        let x = twice(r);
    }
}

fn main() {}
