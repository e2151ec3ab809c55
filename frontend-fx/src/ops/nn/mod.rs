//! Neural-network ops: convolution, normalization, pooling, attention, upsampling, dropout.
//!
//! The registry table of the family; the lowerings are in submodules by topic: `conv`,
//! `norm`, `pool`, `attention`, `embedding` (embedding, dropout, the NLL loss),
//! `embedding_bag`, `upsample` and `grid_sample` (grid samplers, 2-D and 3-D, and their
//! backwards).

mod attention;
mod conv;
mod embedding;
mod embedding_bag;
mod grid_sample;
mod norm;
mod pool;
mod upsample;

pub use attention::*;
pub use conv::*;
use embedding::*;
use embedding_bag::*;
use grid_sample::*;
pub use norm::*;
pub use pool::*;
use upsample::*;

use crate::ops::build::*;

pub const OPS: &[(&str, OpFn)] = &[
    ("convolution.default", convolution),
    ("_convolution.default", convolution),
    ("conv1d.default", conv_nd),
    ("conv2d.default", conv_nd),
    ("conv3d.default", conv_nd),
    ("conv1d.padding", conv_nd),
    ("conv2d.padding", conv_nd),
    ("conv3d.padding", conv_nd),
    ("conv_transpose1d.default", conv_transpose),
    ("conv_transpose2d.input", conv_transpose),
    ("conv_transpose3d.input", conv_transpose),
    ("batch_norm.default", batch_norm),
    ("_native_batch_norm_legit_no_training.default", bn_no_training),
    ("_native_batch_norm_legit.default", bn_legit),
    ("_native_batch_norm_legit.no_stats", bn_no_stats),
    ("_native_batch_norm_legit_functional.default", bn_functional),
    ("native_batch_norm.default", bn_legit),
    ("layer_norm.default", layer_norm),
    ("native_layer_norm.default", native_layer_norm),
    ("group_norm.default", group_norm),
    ("native_group_norm.default", native_group_norm),
    ("instance_norm.default", instance_norm),
    ("rms_norm.default", rms_norm),
    ("max_pool1d.default", max_pool),
    ("max_pool2d.default", max_pool),
    ("max_pool3d.default", max_pool),
    ("max_pool1d_with_indices.default", max_pool_with_indices),
    ("max_pool2d_with_indices.default", max_pool_with_indices),
    ("max_pool3d_with_indices.default", max_pool_with_indices),
    ("avg_pool1d.default", avg_pool),
    ("avg_pool2d.default", avg_pool),
    ("avg_pool3d.default", avg_pool),
    ("adaptive_avg_pool1d.default", adaptive_avg_pool),
    ("adaptive_avg_pool2d.default", adaptive_avg_pool),
    ("adaptive_avg_pool3d.default", adaptive_avg_pool),
    ("_adaptive_avg_pool2d.default", adaptive_avg_pool),
    ("_adaptive_avg_pool3d.default", adaptive_avg_pool),
    ("adaptive_max_pool1d.default", adaptive_max_pool),
    ("adaptive_max_pool2d.default", adaptive_max_pool),
    ("scaled_dot_product_attention.default", sdpa),
    ("_scaled_dot_product_flash_attention_for_cpu.default", sdpa_flash_cpu),
    ("_scaled_dot_product_efficient_attention.default", sdpa_efficient),
    ("embedding.default", embedding),
    ("embedding_bag.default", embedding_bag),
    ("embedding_bag.padding_idx", embedding_bag),
    ("_embedding_bag.default", embedding_bag),
    ("_embedding_bag_forward_only.default", embedding_bag),
    ("_embedding_bag_backward.default", embedding_bag_backward),
    ("_embedding_bag_dense_backward.default", embedding_bag_backward),
    ("_embedding_bag_per_sample_weights_backward.default", embedding_bag_psw_backward),
    ("nll_loss_forward.default", nll_loss_forward),
    ("nll_loss2d_forward.default", nll_loss_forward),
    ("feature_dropout.default", dropout),
    ("alpha_dropout.default", dropout),
    ("feature_alpha_dropout.default", dropout),
    ("upsample_nearest1d.vec", upsample_nearest),
    ("upsample_nearest2d.vec", upsample_nearest),
    ("upsample_nearest3d.vec", upsample_nearest),
    ("upsample_nearest1d.default", upsample_nearest),
    ("upsample_nearest2d.default", upsample_nearest),
    ("upsample_nearest3d.default", upsample_nearest),
    ("_upsample_nearest_exact1d.vec", upsample_nearest_exact),
    ("_upsample_nearest_exact2d.vec", upsample_nearest_exact),
    ("_upsample_nearest_exact2d.default", upsample_nearest_exact),
    ("upsample_linear1d.vec", upsample_linear),
    ("upsample_linear1d.default", upsample_linear),
    ("upsample_bilinear2d.vec", upsample_linear),
    ("upsample_bilinear2d.default", upsample_linear),
    ("upsample_trilinear3d.vec", upsample_linear),
    ("upsample_trilinear3d.default", upsample_linear),
    ("_upsample_bilinear2d_aa.vec", upsample_aa),
    ("_upsample_bilinear2d_aa.default", upsample_aa),
    ("_upsample_bicubic2d_aa.vec", upsample_aa),
    ("_upsample_bicubic2d_aa.default", upsample_aa),
    ("upsample_linear1d_backward.default", upsample_interp_backward),
    ("upsample_bilinear2d_backward.default", upsample_interp_backward),
    ("upsample_trilinear3d_backward.default", upsample_interp_backward),
    ("_upsample_bilinear2d_aa_backward.default", upsample_interp_backward),
    ("_upsample_bicubic2d_aa_backward.default", upsample_interp_backward),
    ("grid_sampler_2d.default", grid_sampler_2d),
    ("grid_sampler_3d.default", grid_sampler_3d),
    ("grid_sampler_2d_backward.default", grid_sampler_2d_backward),
    ("grid_sampler_3d_backward.default", grid_sampler_3d_backward),
    ("convolution_backward.default", convolution_backward),
    ("max_pool2d_with_indices_backward.default", max_pool_backward),
    ("max_pool3d_with_indices_backward.default", max_pool_backward),
    ("avg_pool2d_backward.default", avg_pool_backward),
    ("avg_pool3d_backward.default", avg_pool_backward),
    ("_adaptive_avg_pool2d_backward.default", adaptive_avg_pool_backward),
    ("_adaptive_avg_pool3d_backward.default", adaptive_avg_pool_backward),
    ("_scaled_dot_product_flash_attention_for_cpu_backward.default", sdpa_flash_cpu_backward),
    ("native_layer_norm_backward.default", layer_norm_backward),
    ("native_batch_norm_backward.default", batch_norm_backward),
    ("embedding_dense_backward.default", embedding_dense_backward),
    ("nll_loss_backward.default", nll_loss_backward),
    ("nll_loss2d_backward.default", nll_loss_backward),
];
